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

// tableDefs returns the definitions of the sink's tables, fences first.
func (s *Sink) tableDefs() []tableDef {
	return []tableDef{
		{
			name: s.fences,
			cols: []string{"grp", "topic", "part", "epoch", "member", "next_offset"},
			pk:   []string{"grp", "topic", "part"},
			ddl: `CREATE TABLE ` + s.fences + ` (
	grp         TEXT    NOT NULL,
	topic       TEXT    NOT NULL,
	part        INTEGER NOT NULL,
	epoch       INTEGER NOT NULL,
	member      TEXT    NOT NULL,
	next_offset INTEGER NOT NULL,
	PRIMARY KEY (grp, topic, part)
) WITHOUT ROWID`,
		},
		{
			name: s.history,
			cols: []string{"seq", "grp", "topic", "part", "kind", "epoch", "member", "next_offset", "reason", "at"},
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
	at          TEXT    NOT NULL
)`,
		},
		{
			name: s.schema,
			cols: []string{"version"},
			ddl:  `CREATE TABLE ` + s.schema + ` (version INTEGER NOT NULL)`,
		},
	}
}

// ensureSchema creates the sink's tables if none exists, or checks them if
// all exist, in one writing transaction, so that concurrent Opens of a new
// file create the schema once and a failed Open leaves nothing behind. It
// reports whether it created the schema.
func (s *Sink) ensureSchema(ctx context.Context) (created bool, err error) {
	if err := s.lockWriter(ctx); err != nil {
		return false, s.wrap(ctx, "schema", err)
	}
	defer s.unlockWriter()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, s.openErr(ctx, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()

	defs := s.tableDefs()
	var missing []string
	for _, d := range defs {
		ok, err := s.checkTable(ctx, tx, d)
		if err != nil {
			return false, err
		}
		if !ok {
			missing = append(missing, d.name)
		}
	}
	switch len(missing) {
	case 0:
		if err := s.checkVersion(ctx, tx); err != nil {
			return false, err
		}
		// Tables in place; the index is created if an older Open of this
		// version was interrupted before it (it is part of the same
		// transaction, so that cannot happen, but it costs nothing).
		if _, err := tx.ExecContext(ctx, s.indexDDL(true)); err != nil {
			return false, fmt.Errorf("%w: index %s_history_scope: %w", ErrSchema, s.cfg.Prefix, err)
		}
	case len(defs):
		for _, d := range defs {
			if _, err := tx.ExecContext(ctx, d.ddl); err != nil {
				return false, fmt.Errorf("%w: create table %s: %w", ErrSchema, d.name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, s.indexDDL(false)); err != nil {
			return false, fmt.Errorf("%w: create index %s_history_scope: %w", ErrSchema, s.cfg.Prefix, err)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.schema+" (version) VALUES (?)", SchemaVersion); err != nil {
			return false, s.wrap(ctx, "record schema version", err)
		}
		created = true
	default:
		return false, fmt.Errorf("%w: incomplete schema in %q: table(s) %s missing while the sink's other tables exist",
			ErrSchema, s.cfg.Path, strings.Join(missing, ", "))
	}
	if err := tx.Commit(); err != nil {
		return false, s.wrap(ctx, "commit schema", err)
	}
	return created, nil
}

func (s *Sink) indexDDL(ifNotExists bool) string {
	ine := ""
	if ifNotExists {
		ine = "IF NOT EXISTS "
	}
	return "CREATE INDEX " + ine + s.cfg.Prefix + "_history_scope ON " + s.history + " (grp, topic, part, seq)"
}

// checkTable reports whether table d exists; it fails with ErrSchema if an
// object of that name exists but is not a table with d's columns.
func (s *Sink) checkTable(ctx context.Context, tx *sql.Tx, d tableDef) (bool, error) {
	var typ string
	err := tx.QueryRowContext(ctx, "SELECT type FROM sqlite_schema WHERE lower(name) = lower(?)", d.name).Scan(&typ)
	switch {
	case err == sql.ErrNoRows:
		return false, nil
	case err != nil:
		return false, s.openErr(ctx, err)
	case typ != "table":
		return false, fmt.Errorf("%w: %q already has a %s named %s, where the sink keeps a table", ErrSchema, s.cfg.Path, typ, d.name)
	}
	rows, err := tx.QueryContext(ctx, "SELECT name, pk FROM pragma_table_info(?) ORDER BY cid", d.name)
	if err != nil {
		return false, s.wrap(ctx, "read columns of "+d.name, err)
	}
	defer rows.Close()
	var cols []string
	pk := map[int]string{}
	for rows.Next() {
		var name string
		var pos int
		if err := rows.Scan(&name, &pos); err != nil {
			return false, s.wrap(ctx, "read columns of "+d.name, err)
		}
		cols = append(cols, strings.ToLower(name))
		if pos > 0 {
			pk[pos] = strings.ToLower(name)
		}
	}
	if err := rows.Err(); err != nil {
		return false, s.wrap(ctx, "read columns of "+d.name, err)
	}
	var pkCols []string
	for i := 1; i <= len(pk); i++ {
		pkCols = append(pkCols, pk[i])
	}
	if !slices.Equal(cols, d.cols) || !slices.Equal(pkCols, d.pk) {
		return false, fmt.Errorf("%w: table %s in %q has columns (%s) primary key (%s), want columns (%s) primary key (%s): "+
			"another application uses this name; choose another Config.Prefix",
			ErrSchema, d.name, s.cfg.Path, strings.Join(cols, ", "), strings.Join(pkCols, ", "),
			strings.Join(d.cols, ", "), strings.Join(d.pk, ", "))
	}
	return true, nil
}

// checkVersion fails with ErrSchema unless the schema table holds exactly
// one row, SchemaVersion.
func (s *Sink) checkVersion(ctx context.Context, tx *sql.Tx) error {
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
	if len(versions) != 1 || versions[0] != fmt.Sprint(SchemaVersion) {
		return fmt.Errorf("%w: table %s in %q records schema version(s) [%s], this package uses version %d",
			ErrSchema, s.schema, s.cfg.Path, strings.Join(versions, ", "), SchemaVersion)
	}
	return nil
}
