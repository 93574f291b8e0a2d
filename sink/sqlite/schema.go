package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// tableDef describes one of the sink's tables.
type tableDef struct {
	name string
	cols []string // column names, in order
	pk   []string // primary key columns, in key order
	ddl  string
}

// tableDefs returns the definitions of the sink's tables (schema version
// SchemaVersion), fences first.
func (s *Sink) tableDefs() []tableDef {
	return []tableDef{
		{
			name: s.fences,
			cols: []string{"grp", "topic", "part", "epoch", "member", "next_offset", "topic_id", "proof_required", "ids_version", "duplicates", "spans"},
			pk:   []string{"grp", "topic", "part"},
			ddl: `CREATE TABLE ` + s.fences + ` (
	grp            TEXT    NOT NULL,
	topic          TEXT    NOT NULL,
	part           INTEGER NOT NULL,
	epoch          INTEGER NOT NULL,
	member         TEXT    NOT NULL,
	next_offset    INTEGER NOT NULL,
	topic_id       TEXT    NOT NULL DEFAULT '',
	proof_required INTEGER NOT NULL DEFAULT 0, -- sink.Fence.ProofRequired: set by a reset, never cleared
	ids_version    INTEGER NOT NULL DEFAULT 0,
	duplicates     INTEGER NOT NULL DEFAULT 0, -- sink.Fence.Duplicates
	spans          INTEGER NOT NULL DEFAULT 0, -- how many rows of done_spans the scope has (0: no gap)
	PRIMARY KEY (grp, topic, part)
) WITHOUT ROWID`,
		},
		{
			name: s.history,
			cols: []string{"seq", "grp", "topic", "part", "kind", "epoch", "member", "next_offset", "reason", "at", "topic_id", "detail", "done", "proven"},
			pk:   []string{"seq"},
			ddl: `CREATE TABLE ` + s.history + ` (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	grp         TEXT    NOT NULL,
	topic       TEXT    NOT NULL,
	part        INTEGER NOT NULL,
	kind        TEXT    NOT NULL CHECK (kind IN ('claim', 'reset')),
	epoch       INTEGER NOT NULL,
	member      TEXT    NOT NULL,
	next_offset INTEGER NOT NULL,
	reason      TEXT    NOT NULL,
	at          TEXT    NOT NULL,
	topic_id    TEXT    NOT NULL DEFAULT '',
	detail      TEXT    NOT NULL DEFAULT '',
	done        TEXT    NOT NULL DEFAULT '', -- fenceadmin.Entry.Done, spantext.Format
	proven      INTEGER NOT NULL DEFAULT 0   -- fenceadmin.Entry.Proven
)`,
		},
		{
			name: s.schema,
			cols: []string{"version"},
			ddl:  `CREATE TABLE ` + s.schema + ` (version INTEGER NOT NULL)`,
		},
		{
			name: s.deadLetters,
			cols: []string{"id", "grp", "topic", "part", "topic_id", "off", "rec_key", "rec_value", "headers", "rec_time",
				"reason", "error", "attempts", "epoch", "member", "at", "state", "mirrored"},
			pk: []string{"id"},
			ddl: `CREATE TABLE ` + s.deadLetters + ` (
	id        INTEGER PRIMARY KEY AUTOINCREMENT,
	grp       TEXT    NOT NULL,
	topic     TEXT    NOT NULL,
	part      INTEGER NOT NULL,
	topic_id  TEXT    NOT NULL,
	off       INTEGER NOT NULL,
	rec_key   BLOB,
	rec_value BLOB,
	headers   TEXT    NOT NULL,
	rec_time  TEXT    NOT NULL,
	reason    TEXT    NOT NULL,
	error     TEXT    NOT NULL,
	attempts  INTEGER NOT NULL,
	epoch     INTEGER NOT NULL,
	member    TEXT    NOT NULL,
	at        TEXT    NOT NULL,
	state     TEXT    NOT NULL CHECK (state IN ('open', 'redriving', 'redriven', 'dropped')),
	mirrored  INTEGER NOT NULL DEFAULT 0,
	UNIQUE (grp, topic, part, topic_id, off)
)`,
		},
		{
			name: s.dlAudit,
			cols: []string{"seq", "id", "from_state", "to_state", "reason", "detail", "at"},
			pk:   []string{"seq"},
			ddl: `CREATE TABLE ` + s.dlAudit + ` (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         INTEGER NOT NULL,
	from_state TEXT    NOT NULL,
	to_state   TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	detail     TEXT    NOT NULL,
	at         TEXT    NOT NULL
)`,
		},
		{
			// The command IDs one Apply with IDs applied, one row (cmdids.Encode).
			name: s.commandIDs,
			cols: []string{"seq", "grp", "topic", "part", "first_off", "last_off", "ids"},
			pk:   []string{"seq"},
			ddl: `CREATE TABLE ` + s.commandIDs + ` (
	seq       INTEGER PRIMARY KEY, -- the rowid; not AUTOINCREMENT: nothing refers to it, and reusing one costs nothing
	grp       TEXT    NOT NULL,
	topic     TEXT    NOT NULL,
	part      INTEGER NOT NULL,
	first_off INTEGER NOT NULL,
	last_off  INTEGER NOT NULL,
	ids       BLOB    NOT NULL
)`,
		},
		{
			// The done spans above a scope's NextOffset (sink.Fence.Done,
			// docs/design.md#gaps), written in the transaction that
			// checks the fence and applies the lane's effects.
			name: s.doneSpans,
			cols: []string{"grp", "topic", "part", "from_off", "to_off"},
			pk:   []string{"grp", "topic", "part", "from_off"},
			ddl: `CREATE TABLE ` + s.doneSpans + ` (
	grp      TEXT    NOT NULL,
	topic    TEXT    NOT NULL,
	part     INTEGER NOT NULL,
	from_off INTEGER NOT NULL,
	to_off   INTEGER NOT NULL CHECK (to_off > from_off),
	PRIMARY KEY (grp, topic, part, from_off)
) WITHOUT ROWID`,
		},
	}
}

// oldCols returns the columns of the tables of an older schema version
// that Open migrates (1 to 5), by table name; nil for another version.
func (s *Sink) oldCols(version int) map[string][]string {
	// Version 5: version 6's tables with the fences' proof floor
	// (proof_below, after proof_required) and the history without proven.
	v5 := func() map[string][]string {
		cols := map[string][]string{}
		for _, d := range s.tableDefs() {
			cols[d.name] = d.cols
		}
		fences := slices.Clone(cols[s.fences])
		i := slices.Index(fences, "proof_required") + 1
		cols[s.fences] = slices.Insert(fences, i, "proof_below")
		cols[s.history] = slices.DeleteFunc(slices.Clone(cols[s.history]), func(c string) bool { return c == "proven" })
		return cols
	}
	// Version 4: version 5's tables without the done spans, the fences
	// without spans.
	v4 := func() map[string][]string {
		cols := v5()
		delete(cols, s.doneSpans)
		cols[s.fences] = slices.DeleteFunc(slices.Clone(cols[s.fences]), func(c string) bool { return c == "spans" })
		cols[s.history] = slices.DeleteFunc(slices.Clone(cols[s.history]), func(c string) bool { return c == "done" })
		return cols
	}
	// Version 3: version 4's tables without the command IDs, the fences
	// without ids_version and duplicates.
	v3 := func() map[string][]string {
		cols := v4()
		delete(cols, s.commandIDs)
		cols[s.fences] = slices.DeleteFunc(slices.Clone(cols[s.fences]), func(c string) bool { return c == "ids_version" || c == "duplicates" })
		return cols
	}
	switch version {
	case 1:
		return map[string][]string{
			s.fences:  {"grp", "topic", "part", "epoch", "member", "next_offset"},
			s.history: {"seq", "grp", "topic", "part", "kind", "epoch", "member", "next_offset", "reason", "at"},
			s.schema:  {"version"},
		}
	case 2:
		// Version 3's tables, the fences without proof_below.
		cols := v3()
		cols[s.fences] = slices.DeleteFunc(slices.Clone(cols[s.fences]), func(c string) bool { return c == "proof_below" })
		return cols
	case 3:
		return v3()
	case 4:
		return v4()
	case 5:
		return v5()
	}
	return nil
}

// ensureSchema creates the sink's tables if none exists, migrates a
// version 1 to 5 schema to the current one, or checks the tables if all exist,
// in one writing transaction, so that concurrent Opens of a new file create
// (or migrate) the schema once and a failed Open leaves nothing behind. It
// reports what it did: "created", "migrated from version N" or "".
func (s *Sink) ensureSchema(ctx context.Context) (did string, err error) {
	if err := s.lockWriter(ctx); err != nil {
		return "", s.wrap(ctx, "schema", err)
	}
	defer s.unlockWriter()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", s.openErr(ctx, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()

	defs := s.tableDefs()
	tables := map[string]table{}
	var present, missing []string
	for _, d := range defs {
		t, err := s.readTable(ctx, tx, d.name)
		if err != nil {
			return "", err
		}
		tables[d.name] = t
		if t.exists {
			present = append(present, d.name)
		} else {
			missing = append(missing, d.name)
		}
	}
	old := s.oldVersion(tables)
	switch {
	case len(present) == 0:
		for _, d := range defs {
			if _, err := tx.ExecContext(ctx, d.ddl); err != nil {
				return "", fmt.Errorf("%w: create table %s: %w", ErrSchema, d.name, err)
			}
		}
		if err := s.createIndexes(ctx, tx, false); err != nil {
			return "", err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.schema+" (version) VALUES (?)", SchemaVersion); err != nil {
			return "", s.wrap(ctx, "record schema version", err)
		}
		did = "created"
	case old != 0:
		if err := s.checkVersion(ctx, tx, old); err != nil {
			return "", err
		}
		if err := s.migrate(ctx, tx, defs, old); err != nil {
			return "", err
		}
		did = fmt.Sprintf("migrated from version %d", old)
	case len(missing) == 0:
		for _, d := range defs {
			if err := s.checkTable(d, tables[d.name]); err != nil {
				return "", err
			}
		}
		if err := s.checkVersion(ctx, tx, SchemaVersion); err != nil {
			return "", err
		}
		if err := s.createIndexes(ctx, tx, true); err != nil {
			return "", err
		}
	default:
		for _, d := range defs {
			if t := tables[d.name]; t.exists {
				if err := s.checkTable(d, t); err != nil {
					return "", err
				}
			}
		}
		return "", fmt.Errorf("%w: incomplete schema in %q: table(s) %s missing while the sink's other tables exist",
			ErrSchema, s.cfg.Path, strings.Join(missing, ", "))
	}
	if err := tx.Commit(); err != nil {
		return "", s.wrap(ctx, "commit schema", err)
	}
	return did, nil
}

// oldVersion returns the older schema version (1 to 5) whose tables,
// and only those, tables holds exactly; 0 if none.
func (s *Sink) oldVersion(tables map[string]table) int {
	for _, v := range []int{1, 2, 3, 4, 5} {
		cols, match := s.oldCols(v), true
		for name, t := range tables {
			c, ok := cols[name]
			if t.exists != ok || ok && !sameColumns(t.cols, c) {
				match = false
				break
			}
		}
		if match {
			return v
		}
	}
	return 0
}

// migrate turns a schema of version from (1 to 5) into the current one.
// From version 1: the fence and history rows gain a topic ID (empty:
// adopted on the next claim that observes one), the fences a proof
// requirement and the history a detail, and the dead letter tables are
// created. From versions 1 and 2: the fences gain the proof floor
// (proof_below), set from the history's resets, the highest epoch a reset
// cleared plus one (fenceadmin.AfterReset), so that a scope reset before
// the migration still asks a proof of its previous incarnation's epochs.
// From versions 1 to 3: the fences gain the IDs version (ids_version, 0)
// and the count of skipped duplicates (duplicates, 0), and the command
// IDs table is created, empty (no command applied before
// had its ID recorded). From versions 1 to 4: the fences gain the count
// of done spans (spans, 0), the history rows their done spans (done, empty),
// and the done spans table is created, empty (no scope had gaps before).
// From versions 1 to 5: a proof floor folds into the proof requirement,
// which no claim clears any more (every claim after a reset needs a
// proof: sink.Fence.ProofRequired), proof_below is dropped, and the
// history rows gain proven (0: whether an older claim was proven was
// not recorded).
func (s *Sink) migrate(ctx context.Context, tx *sql.Tx, defs []tableDef, from int) error {
	var stmts []string
	if from == 1 {
		stmts = append(stmts,
			`ALTER TABLE `+s.fences+` ADD COLUMN topic_id TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE `+s.fences+` ADD COLUMN proof_required INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE `+s.history+` ADD COLUMN topic_id TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE `+s.history+` ADD COLUMN detail TEXT NOT NULL DEFAULT ''`)
		for _, d := range defs {
			if d.name == s.deadLetters || d.name == s.dlAudit {
				stmts = append(stmts, d.ddl)
			}
		}
	}
	if from <= 2 {
		stmts = append(stmts,
			`ALTER TABLE `+s.fences+` ADD COLUMN proof_below INTEGER NOT NULL DEFAULT 0`,
			`UPDATE `+s.fences+` SET proof_below = coalesce((SELECT max(h.epoch) + 1 FROM `+s.history+` h
			WHERE h.grp = `+s.fences+`.grp AND h.topic = `+s.fences+`.topic AND h.part = `+s.fences+`.part
			AND h.kind = 'reset' AND h.epoch >= 0), 0)`)
	}
	if from <= 3 {
		stmts = append(stmts, `ALTER TABLE `+s.fences+` ADD COLUMN ids_version INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE `+s.fences+` ADD COLUMN duplicates INTEGER NOT NULL DEFAULT 0`)
		for _, d := range defs {
			if d.name == s.commandIDs {
				stmts = append(stmts, d.ddl)
			}
		}
	}
	if from <= 4 {
		stmts = append(stmts, `ALTER TABLE `+s.fences+` ADD COLUMN spans INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE `+s.history+` ADD COLUMN done TEXT NOT NULL DEFAULT ''`)
		for _, d := range defs {
			if d.name == s.doneSpans {
				stmts = append(stmts, d.ddl)
			}
		}
	}
	stmts = append(stmts, `UPDATE `+s.fences+` SET proof_required = 1 WHERE proof_below > 0`,
		`ALTER TABLE `+s.fences+` DROP COLUMN proof_below`,
		`ALTER TABLE `+s.history+` ADD COLUMN proven INTEGER NOT NULL DEFAULT 0`)
	stmts = append(stmts, `UPDATE `+s.schema+` SET version = `+fmt.Sprint(SchemaVersion))
	for _, q := range stmts {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%w: migrating %q from schema version %d: %w", ErrSchema, s.cfg.Path, from, err)
		}
	}
	return s.createIndexes(ctx, tx, true)
}

// createIndexes creates the sink's indexes.
func (s *Sink) createIndexes(ctx context.Context, tx *sql.Tx, ifNotExists bool) error {
	ine := ""
	if ifNotExists {
		ine = "IF NOT EXISTS "
	}
	for _, q := range []string{
		s.indexDDL(ifNotExists),
		"CREATE INDEX " + ine + s.cfg.Prefix + "_dead_letters_scope ON " + s.deadLetters + " (grp, topic, part, id)",
		"CREATE INDEX " + ine + s.cfg.Prefix + "_dl_audit_id ON " + s.dlAudit + " (id, seq)",
		// The load and the prune of an Apply with IDs: ranges of the scope.
		"CREATE INDEX " + ine + s.cfg.Prefix + "_command_ids_scope ON " + s.commandIDs + " (grp, topic, part, last_off)",
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%w: index: %w", ErrSchema, err)
		}
	}
	return nil
}

func (s *Sink) indexDDL(ifNotExists bool) string {
	ine := ""
	if ifNotExists {
		ine = "IF NOT EXISTS "
	}
	return "CREATE INDEX " + ine + s.cfg.Prefix + "_history_scope ON " + s.history + " (grp, topic, part, seq)"
}

// table is what the database has under one of the sink's table names.
type table struct {
	exists bool
	typ    string   // "table", or what else has the name
	cols   []string // lower-cased, in order
	pk     []string // in key order
}

// readTable reads what the database has under name.
func (s *Sink) readTable(ctx context.Context, tx *sql.Tx, name string) (table, error) {
	var t table
	err := tx.QueryRowContext(ctx, "SELECT type FROM sqlite_schema WHERE lower(name) = lower(?)", name).Scan(&t.typ)
	switch {
	case err == sql.ErrNoRows:
		return table{}, nil
	case err != nil:
		return table{}, s.openErr(ctx, err)
	case t.typ != "table":
		return table{}, fmt.Errorf("%w: %q already has a %s named %s, where the sink keeps a table", ErrSchema, s.cfg.Path, t.typ, name)
	}
	t.exists = true
	rows, err := tx.QueryContext(ctx, "SELECT name, pk FROM pragma_table_info(?) ORDER BY cid", name)
	if err != nil {
		return table{}, s.wrap(ctx, "read columns of "+name, err)
	}
	defer rows.Close()
	pk := map[int]string{}
	for rows.Next() {
		var col string
		var pos int
		if err := rows.Scan(&col, &pos); err != nil {
			return table{}, s.wrap(ctx, "read columns of "+name, err)
		}
		t.cols = append(t.cols, strings.ToLower(col))
		if pos > 0 {
			pk[pos] = strings.ToLower(col)
		}
	}
	if err := rows.Err(); err != nil {
		return table{}, s.wrap(ctx, "read columns of "+name, err)
	}
	for i := 1; i <= len(pk); i++ {
		t.pk = append(t.pk, pk[i])
	}
	return t, nil
}

// checkTable fails with ErrSchema unless t has d's columns and key.
func (s *Sink) checkTable(d tableDef, t table) error {
	if !sameColumns(t.cols, d.cols) || !slices.Equal(t.pk, d.pk) {
		return fmt.Errorf("%w: table %s in %q has columns (%s) primary key (%s), want columns (%s) primary key (%s): "+
			"another application uses this name; choose another Config.Prefix",
			ErrSchema, d.name, s.cfg.Path, strings.Join(t.cols, ", "), strings.Join(t.pk, ", "),
			strings.Join(d.cols, ", "), strings.Join(d.pk, ", "))
	}
	return nil
}

// sameColumns reports whether a and b name the same columns, in any
// order: a migration appends the columns it adds and drops others in
// place, so a migrated table and a new one may list them in different
// orders, and every statement of the sink names its columns.
func sameColumns(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// checkVersion fails with ErrSchema unless the schema table holds exactly
// one row, want.
func (s *Sink) checkVersion(ctx context.Context, tx *sql.Tx, want int) error {
	rows, err := tx.QueryContext(ctx, "SELECT version FROM "+s.schema)
	if err != nil {
		return s.wrap(ctx, "read schema version", err)
	}
	defer rows.Close()
	var versions []string
	for rows.Next() {
		var v sql.NullString
		if err := rows.Scan(&v); err != nil {
			return s.wrap(ctx, "read schema version", err)
		}
		versions = append(versions, v.String)
	}
	if err := rows.Err(); err != nil {
		return s.wrap(ctx, "read schema version", err)
	}
	if len(versions) != 1 || versions[0] != fmt.Sprint(want) {
		return fmt.Errorf("%w: table %s in %q records schema version(s) [%s], this package uses version %d (and migrates versions 1 to 4)",
			ErrSchema, s.schema, s.cfg.Path, strings.Join(versions, ", "), SchemaVersion)
	}
	return nil
}
