package sink

// MaxCommandIDLen is the longest command ID, in bytes, a sink with a
// dedupe window accepts (PostgreSQL's B-tree entries and SQLite's pages stay small).
const MaxCommandIDLen = 255
