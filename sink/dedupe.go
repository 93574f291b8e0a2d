package sink

// DefaultDedupeWindow is the retention horizon of applied command IDs of
// a backend configured with a zero window: the IDs of a scope's last
// 100,000 offsets (docs/design.md#command-ids for the measurement behind
// it: about 15 MB per partition in SQLite and PostgreSQL).
const DefaultDedupeWindow int64 = 100_000

// MaxCommandIDLen is the longest command ID, in bytes, a sink with a
// dedupe window accepts (PostgreSQL's B-tree entries and SQLite's pages stay small).
const MaxCommandIDLen = 255
