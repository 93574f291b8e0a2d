package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaVersion is the version of the sink's tables this code reads and
// writes. Version 2 added the log identity (topic ID), the reset's proof
// requirement and the dead letters; version 3 the proof floor
// (proof_below); version 4 the applied command IDs
// (sink.Features.DedupeWindow) and the fences' count of skipped duplicates
// (sink.Fence.Duplicates); version 5 the done spans of a checkpoint with
// gaps (sink.Features.Gaps: the <prefix>_done table and the fences' gapped
// flag); version 6 one done row per lane batch (the spans column, see
// spans.go); version 7 made the proof requirement permanent (no proof
// floor) and records whether each claim was proven
// (fenceadmin.Entry.Proven). Open migrates a version 1 to 6 schema in
// place.
const schemaVersion = 7

// column is one expected column of a sink table, its type as PostgreSQL's
// format_type spells it.
type column struct{ name, typ string }

// tableSpec is one of the sink's tables: its name suffix, DDL (with %s for
// the qualified table name) and the columns its CREATE TABLE declares.
type tableSpec struct {
	suffix  string
	ddl     []string // statements; %[1]s is the table, %[2]s the prefix-based index name
	columns []column // ddlColumns of ddl[0]
}

// tables are the sink's tables, in creation order.
var tables = withColumns([]tableSpec{
	{
		suffix: "_fences",
		ddl: []string{`CREATE TABLE %[1]s (
			grp text NOT NULL,
			topic text NOT NULL,
			part int NOT NULL,
			epoch int NOT NULL,
			member text NOT NULL,
			next_offset bigint NOT NULL DEFAULT 0,
			topic_id text NOT NULL DEFAULT '',
			proof_required boolean NOT NULL DEFAULT false, -- sink.Fence.ProofRequired: set by a reset, never cleared
			ids_version bigint NOT NULL DEFAULT 0,
			duplicates bigint NOT NULL DEFAULT 0,
			gapped boolean NOT NULL DEFAULT false,
			PRIMARY KEY (grp, topic, part))`},
	},
	{
		suffix: "_history",
		ddl: []string{
			`CREATE TABLE %[1]s (
			seq bigserial PRIMARY KEY,
			grp text NOT NULL,
			topic text NOT NULL,
			part int NOT NULL,
			kind text NOT NULL CHECK (kind IN ('claim', 'reset')),
			epoch int NOT NULL,
			member text NOT NULL,
			next_offset bigint NOT NULL,
			reason text NOT NULL DEFAULT '',
			at timestamptz NOT NULL DEFAULT now(),
			topic_id text NOT NULL DEFAULT '',
			detail text NOT NULL DEFAULT '',
			done text NOT NULL DEFAULT '', -- fenceadmin.Entry.Done, spantext.Format
			proven boolean NOT NULL DEFAULT false)`, // fenceadmin.Entry.Proven
			`CREATE INDEX %[2]s ON %[1]s (grp, topic, part, seq)`,
		},
	},
	{
		suffix: "_schema",
		ddl:    []string{`CREATE TABLE %[1]s (version int NOT NULL)`},
	},
	{
		suffix: "_dead_letters",
		ddl: []string{
			`CREATE TABLE %[1]s (
			id bigserial PRIMARY KEY,
			grp text NOT NULL,
			topic text NOT NULL,
			part int NOT NULL,
			topic_id text NOT NULL,
			off bigint NOT NULL,
			rec_key bytea,
			rec_value bytea,
			headers text NOT NULL,
			rec_time timestamptz NOT NULL,
			reason text NOT NULL,
			error text NOT NULL,
			attempts int NOT NULL,
			epoch int NOT NULL,
			member text NOT NULL,
			at timestamptz NOT NULL DEFAULT now(),
			state text NOT NULL CHECK (state IN ('open', 'redriving', 'redriven', 'dropped')),
			mirrored boolean NOT NULL DEFAULT false,
			UNIQUE (grp, topic, part, topic_id, off))`,
			`CREATE INDEX %[2]s ON %[1]s (grp, topic, part, id)`,
		},
	},
	{
		suffix: "_dl_audit",
		ddl: []string{
			`CREATE TABLE %[1]s (
			seq bigserial PRIMARY KEY,
			id bigint NOT NULL,
			from_state text NOT NULL,
			to_state text NOT NULL,
			reason text NOT NULL,
			detail text NOT NULL,
			at timestamptz NOT NULL DEFAULT now())`,
			`CREATE INDEX %[2]s ON %[1]s (id, seq)`,
		},
	},
	{
		// The command IDs one Apply with IDs applied, one row (cmdids.Encode).
		suffix: "_command_ids",
		ddl: []string{
			`CREATE TABLE %[1]s (
			seq bigserial PRIMARY KEY,
			grp text NOT NULL,
			topic text NOT NULL,
			part int NOT NULL,
			first_off bigint NOT NULL,
			last_off bigint NOT NULL,
			ids bytea NOT NULL)
			WITH (toast_tuple_target = 8160)`, // a batch's row stays in the heap page (no TOAST) up to ~400 UUIDs
			// The load and the prune of an Apply with IDs: ranges of the scope.
			`CREATE INDEX %[2]s ON %[1]s (grp, topic, part, last_off)`,
		},
	},
	{
		// The done spans above a gapped scope's watermark
		// (sink.Features.Gaps, gaps.go): one row per lane batch, its spans
		// from from_off to to_off (spans: all of them, encoded, when
		// there are several; NULL for one, spans.go), keyed by its end
		// (a lane's reads and the compaction are ranges of to_off; the
		// key also refuses the same batch recorded twice by two
		// attempts in flight at once). dups counts the duplicates of the
		// lane batch that inserted the row, folded into the fence's
		// duplicates when the row is compacted.
		suffix: "_done",
		ddl: []string{
			`CREATE TABLE %[1]s (
			grp text NOT NULL,
			topic text NOT NULL,
			part int NOT NULL,
			from_off bigint NOT NULL,
			to_off bigint NOT NULL,
			dups bigint NOT NULL DEFAULT 0,
			spans bytea,
			CHECK (from_off < to_off),
			PRIMARY KEY (grp, topic, part, to_off))`,
		},
	},
})

// withColumns fills each table's columns from its CREATE TABLE statement,
// so that the columns Open expects are the columns the DDL creates.
func withColumns(ts []tableSpec) []tableSpec {
	for i := range ts {
		ts[i].columns = ddlColumns(ts[i].ddl[0])
	}
	return ts
}

// ddlColumns returns the columns a CREATE TABLE statement of this file
// declares, one per line, in order, with their types as PostgreSQL's
// format_type spells them; table constraints (PRIMARY KEY, UNIQUE, CHECK)
// and storage options are not columns.
func ddlColumns(ddl string) []column {
	_, body, _ := strings.Cut(ddl, "(")
	spelled := map[string]string{
		"int": "integer", "bigserial": "bigint", "timestamptz": "timestamp with time zone",
	}
	var cols []column
	for _, line := range strings.Split(body, "\n") {
		line, _, _ = strings.Cut(line, "--")
		f := strings.Fields(line)
		if len(f) < 2 || strings.ToUpper(f[0]) == f[0] { // a constraint or an option
			continue
		}
		typ := strings.TrimRight(f[1], ",)")
		if s, ok := spelled[typ]; ok {
			typ = s
		}
		cols = append(cols, column{f[0], typ})
	}
	return cols
}

// commandIDsTable is the index in tables of the command IDs, which
// version 4 added; doneTable the index of the done spans, which version 5
// added.
const (
	commandIDsTable = 5
	doneTable       = 6
)

// fencesV6 and historyV6 are the columns of the fences and the history
// up to version 6: the fences with the proof floor (proof_below, after
// proof_required), the history without proven (the last column now).
var (
	fencesV6  = slices.Insert(slices.Clone(tables[0].columns), 8, column{"proof_below", "bigint"})
	historyV6 = tables[1].columns[:13]
)

// oldColumns are the columns of the tables of the older schema versions
// Open migrates, by version and table suffix.
var oldColumns = map[int32]map[string][]column{
	1: {
		"_fences":  fencesV6[:6],
		"_history": historyV6[:10],
		"_schema":  tables[2].columns,
	},
	// Version 3's tables, the fences without proof_below.
	2: {
		"_fences":       fencesV6[:8],
		"_history":      historyV6[:12],
		"_schema":       tables[2].columns,
		"_dead_letters": tables[3].columns,
		"_dl_audit":     tables[4].columns,
	},
	// Version 4's tables without the command IDs, the fences without
	// ids_version and duplicates.
	3: {
		"_fences":       fencesV6[:9],
		"_history":      historyV6[:12],
		"_schema":       tables[2].columns,
		"_dead_letters": tables[3].columns,
		"_dl_audit":     tables[4].columns,
	},
	// Version 5's tables without the done spans, the fences without
	// gapped, the history without done.
	4: {
		"_fences":       fencesV6[:11],
		"_history":      historyV6[:12],
		"_schema":       tables[2].columns,
		"_dead_letters": tables[3].columns,
		"_dl_audit":     tables[4].columns,
		"_command_ids":  tables[5].columns,
	},
	// Version 6's tables, the done rows without spans (one row per span).
	5: {
		"_fences":       fencesV6,
		"_history":      historyV6,
		"_schema":       tables[2].columns,
		"_dead_letters": tables[3].columns,
		"_dl_audit":     tables[4].columns,
		"_command_ids":  tables[5].columns,
		"_done":         tables[6].columns[:6],
	},
	// Version 7's tables with the fences' proof floor and the history
	// without proven.
	6: {
		"_fences":       fencesV6,
		"_history":      historyV6,
		"_schema":       tables[2].columns,
		"_dead_letters": tables[3].columns,
		"_dl_audit":     tables[4].columns,
		"_command_ids":  tables[5].columns,
		"_done":         tables[6].columns,
	},
}

// queries holds the sink's SQL with its table names filled in.
type queries struct {
	fences, history, schema, deadLetters, dlAudit, commandIDs string // qualified, quoted table names

	fenceLock                                  string // the fence row, locked until the transaction ends: claims, dead letters and resets read it so
	claimInsert, claimUpdate, claimHistory     string
	fenceVersion                               string // sink.Fence.Version: the scope's last history row
	requireProof                               string // a takeover's: proof_required for good
	fenceRead, advance, advanceOnce, fenceList string
	advanceCheck, advanceOnceCheck             string // advance and advanceOnce, raising when they match no row (checked)
	reset, resetAudit, historyList             string
	dlInsert, dlColumns                        string
	idInsert, idSelect, idPrune                string

	gap gapQueries // the checkpoint with gaps (gaps.go)
}

func newQueries(schema, prefix string) queries {
	q := queries{
		fences:      pgx.Identifier{schema, prefix + "_fences"}.Sanitize(),
		history:     pgx.Identifier{schema, prefix + "_history"}.Sanitize(),
		schema:      pgx.Identifier{schema, prefix + "_schema"}.Sanitize(),
		deadLetters: pgx.Identifier{schema, prefix + "_dead_letters"}.Sanitize(),
		dlAudit:     pgx.Identifier{schema, prefix + "_dl_audit"}.Sanitize(),
		commandIDs:  pgx.Identifier{schema, prefix + "_command_ids"}.Sanitize(),
	}
	// Claim: a row for a new scope (no holder, starting at $4 on log $5),
	// then the row locked, decided in Go, updated and recorded, in one
	// transaction.
	q.claimInsert = fmt.Sprintf(`INSERT INTO %s (grp, topic, part, epoch, member, next_offset, topic_id)
		VALUES ($1, $2, $3, -1, '', $4, $5) ON CONFLICT (grp, topic, part) DO NOTHING`, q.fences)
	q.fenceLock = fmt.Sprintf(`SELECT epoch, member, next_offset, topic_id, proof_required, duplicates, gapped, ids_version FROM %s
		WHERE grp = $1 AND topic = $2 AND part = $3 FOR UPDATE`, q.fences)
	// The fence's version (sink.Fence.Version) is its last history row.
	q.fenceVersion = fmt.Sprintf(`SELECT coalesce(max(seq), 0) FROM %s WHERE grp = $1 AND topic = $2 AND part = $3`, q.history)
	// A claim keeps proof_required (a new row starts false): only a
	// reset sets it, and nothing clears it (sink.Fence.ProofRequired).
	q.claimUpdate = fmt.Sprintf(`UPDATE %s SET epoch = $4, member = $5, topic_id = $6
		WHERE grp = $1 AND topic = $2 AND part = $3`, q.fences)
	q.claimHistory = fmt.Sprintf(`INSERT INTO %s (grp, topic, part, kind, epoch, member, next_offset, topic_id, done, proven)
		VALUES ($1, $2, $3, 'claim', $4, $5, $6, $7, $8, $9)`, q.history)
	q.fenceRead = fmt.Sprintf(`SELECT epoch, member, next_offset, ids_version, gapped FROM %s WHERE grp = $1 AND topic = $2 AND part = $3`, q.fences)
	// A plain advance never moves a gapped scope's watermark (its done
	// spans would be left behind): a gapped scope fails the check, and
	// the batch runs again on the early read, which sees the flag
	// (applyOnGapped).
	q.advance = fmt.Sprintf(`UPDATE %s SET next_offset = $7
		WHERE grp = $1 AND topic = $2 AND part = $3 AND epoch = $4 AND member = $5 AND next_offset = $6 AND NOT gapped`, q.fences)
	// The advance of an Apply with IDs also bumps the IDs version, on the condition
	// that it is the one read (cmdids), and counts the batch's $9
	// duplicates.
	q.advanceOnce = fmt.Sprintf(`UPDATE %s SET next_offset = $7, ids_version = ids_version + 1, duplicates = duplicates + $9
		WHERE grp = $1 AND topic = $2 AND part = $3 AND epoch = $4 AND member = $5 AND next_offset = $6 AND ids_version = $8 AND NOT gapped`, q.fences)
	// The advance of Apply, with or without IDs, as one statement that fails when
	// it matches no row, so that the COMMIT pipelined after it does not
	// run: the data-modifying CTE always runs, count(*) of its rows is
	// not a constant the planner could fold, and casting the marker text
	// to int raises 22P02 at execution (fenceCheckMarker).
	q.advanceCheck = checked(q.advance)
	q.advanceOnceCheck = checked(q.advanceOnce)
	q.requireProof = fmt.Sprintf(`UPDATE %s SET proof_required = true WHERE grp = $1 AND topic = $2 AND part = $3`, q.fences)
	q.fenceList = fmt.Sprintf(`SELECT grp, topic, part, epoch, member, next_offset, topic_id, proof_required, duplicates,
		(SELECT coalesce(max(h.seq), 0) FROM %[2]s h WHERE h.grp = f.grp AND h.topic = f.topic AND h.part = f.part)
		FROM %[1]s f ORDER BY grp, topic, part`, q.fences, q.history)
	q.reset = fmt.Sprintf(`UPDATE %s SET epoch = -1, member = '', next_offset = $4, topic_id = $5, proof_required = true
		WHERE grp = $1 AND topic = $2 AND part = $3`, q.fences)
	q.resetAudit = fmt.Sprintf(`INSERT INTO %s (grp, topic, part, kind, epoch, member, next_offset, reason, topic_id, detail, done)
		VALUES ($1, $2, $3, 'reset', $4, $5, $6, $7, $8, $9, $10)`, q.history)
	q.historyList = fmt.Sprintf(`SELECT seq, kind, epoch, member, next_offset, reason, at, topic_id, detail, done, proven FROM %s
		WHERE grp = $1 AND topic = $2 AND part = $3 ORDER BY seq`, q.history)
	q.dlInsert = fmt.Sprintf(`INSERT INTO %s (grp, topic, part, topic_id, off, rec_key, rec_value, headers, rec_time, reason, error, attempts, epoch, member, state)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, 'open') RETURNING id`, q.deadLetters)
	q.dlColumns = "id, grp, topic, part, topic_id, off, rec_key, rec_value, headers, rec_time, reason, error, attempts, epoch, member, at, state, mirrored"
	// an Apply with IDs: the IDs of a batch are one row; the load and the prune
	// are ranges of the scope.
	q.idInsert = fmt.Sprintf(`INSERT INTO %s (grp, topic, part, first_off, last_off, ids) VALUES ($1, $2, $3, $4, $5, $6)`, q.commandIDs)
	q.idSelect = fmt.Sprintf(`SELECT first_off, last_off, ids FROM %s WHERE grp = $1 AND topic = $2 AND part = $3`, q.commandIDs)
	q.idPrune = fmt.Sprintf(`DELETE FROM %s WHERE grp = $1 AND topic = $2 AND part = $3 AND last_off < $4`, q.commandIDs)
	q.gap = newGapQueries(schema, prefix, q)
	return q
}

// fenceCheckMarker is the text whose cast to int fails the checked
// advance (queries.advanceCheck) when it matched no row: the message of
// that 22P02 error contains it.
const fenceCheckMarker = "workrouter: the fence check matched no row"

// checked wraps update, an UPDATE of one row, in a statement that raises
// (SQLSTATE 22P02, a message naming fenceCheckMarker) unless it updated
// exactly one row.
func checked(update string) string {
	return `WITH adv AS (` + update + ` RETURNING 1)
		SELECT (CASE WHEN count(*) = 1 THEN '1' ELSE '` + fenceCheckMarker + `' END)::int FROM adv`
}

// ensureSchema creates the sink's tables if none exists, or checks that
// the existing ones are the sink's, of the current version (migrating
// versions 1 to 6). Everything happens in one
// transaction under an advisory lock keyed by schema and prefix, so
// concurrent Opens serialize and a failure leaves nothing behind.
func (s *Sink) ensureSchema(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap(ctx, "open: begin schema transaction", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it is a no-op
	lockKey := "workrouter/sink/postgres:" + s.schema + "." + s.prefix
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, lockKey); err != nil {
		return wrap(ctx, "open: schema lock", err)
	}

	// What exists under our names, and with which columns.
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = s.prefix + t.suffix
	}
	rows, err := tx.Query(ctx, `SELECT c.relname::text, c.relkind::text, coalesce(a.attname::text, ''), coalesce(format_type(a.atttypid, a.atttypmod), '')
		FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relname = ANY($2)
		ORDER BY c.relname, a.attnum`, s.schema, names)
	if err != nil {
		return wrap(ctx, "open: read catalog", err)
	}
	type found struct {
		kind string
		cols []column
	}
	existing := map[string]*found{}
	var name, kind, col, typ string
	_, err = pgx.ForEachRow(rows, []any{&name, &kind, &col, &typ}, func() error {
		f := existing[name]
		if f == nil {
			f = &found{kind: kind}
			existing[name] = f
		}
		if col != "" {
			f.cols = append(f.cols, column{col, typ})
		}
		return nil
	})
	if err != nil {
		return wrap(ctx, "open: read catalog", err)
	}

	// An older schema: its tables with their columns, and nothing else
	// of ours.
	for _, version := range []int32{1, 2, 3, 4, 5, 6} {
		old := len(existing) == len(oldColumns[version])
		for suffix, cols := range oldColumns[version] {
			f := existing[s.prefix+suffix]
			old = old && f != nil && sameColumns(f.cols, cols)
		}
		if old {
			if s.readOnly {
				return fmt.Errorf("%w: schema %s holds workrouter sink tables of version %d, which a read-only open cannot migrate to version %d: open it once read-write (a worker does) and try again",
					ErrSchema, s.schema, version, schemaVersion)
			}
			return s.migrate(ctx, tx, version)
		}
	}
	for _, t := range tables {
		name := s.prefix + t.suffix
		f := existing[name]
		if f == nil {
			continue
		}
		qualified := s.schema + "." + name
		if f.kind != "r" && f.kind != "p" {
			return fmt.Errorf("%w: %s exists but is not a table (relkind %q); choose another Config.Prefix or Config.Schema", ErrSchema, qualified, f.kind)
		}
		if !sameColumns(f.cols, t.columns) {
			return fmt.Errorf("%w: table %s exists with columns (%s), want (%s): it is not a workrouter sink table of version %d; choose another Config.Prefix or Config.Schema",
				ErrSchema, qualified, formatColumns(f.cols), formatColumns(t.columns), schemaVersion)
		}
	}
	switch len(existing) {
	case 0:
		if s.readOnly {
			return s.noSchema()
		}
		return s.createSchema(ctx, tx)
	case len(tables):
	default:
		var missing []string
		for _, t := range tables {
			if existing[s.prefix+t.suffix] == nil {
				missing = append(missing, s.schema+"."+s.prefix+t.suffix)
			}
		}
		return fmt.Errorf("%w: incomplete sink schema in %s: tables %s exist but %s are missing; restore them or choose another Config.Prefix",
			ErrSchema, s.schema, strings.Join(slices.Sorted(maps.Keys(existing)), ", "), strings.Join(missing, ", "))
	}

	// All the tables exist with the right columns: check the version.
	var versions []int32
	rows, err = tx.Query(ctx, fmt.Sprintf(`SELECT version FROM %s`, s.q.schema))
	if err != nil {
		return wrap(ctx, "open: read schema version", err)
	}
	if versions, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		return wrap(ctx, "open: read schema version", err)
	}
	if len(versions) != 1 || versions[0] != schemaVersion {
		return fmt.Errorf("%w: table %s.%s_schema holds versions %v, want exactly [%d]: the database was written by another version of workrouter",
			ErrSchema, s.schema, s.prefix, versions, schemaVersion)
	}
	return tx.Commit(ctx)
}

// migrate turns a schema of version from (1 to 6) into the current one,
// in tx, and commits. From version 1: the fence and history rows gain a
// topic ID (empty: adopted on the next claim that observes one), the
// fences a proof requirement and the history a detail, and the dead
// letter tables are created. From versions 1 and 2: the fences gain the
// proof floor (proof_below), set from the history's resets, the highest
// epoch a reset cleared plus one (fenceadmin.AfterReset), so that a scope
// reset before the migration still asks a proof of its previous
// incarnation's epochs. From versions 1 to 3: the fences gain the IDs
// version (ids_version, 0) and the count of skipped duplicates
// (duplicates, 0), and the command IDs table is created, empty
// (no command applied before had its ID recorded). From versions 1 to 4:
// the fences gain the gapped flag (false), the history rows their done
// spans (done, empty), and the done spans table is created, empty (no
// scope had gaps). From version 5: the done rows gain the spans column
// (NULL: each old row is its one span). From versions 1 to 6: a proof
// floor folds into the proof requirement, which no claim clears any more
// (every claim after a reset needs a proof: sink.Fence.ProofRequired),
// proof_below is dropped, and the history rows gain proven (false:
// whether an older claim was proven was not recorded).
func (s *Sink) migrate(ctx context.Context, tx pgx.Tx, from int32) error {
	var versions []int32
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT version FROM %s`, s.q.schema))
	if err != nil {
		return wrap(ctx, "open: read schema version", err)
	}
	if versions, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
		return wrap(ctx, "open: read schema version", err)
	}
	if len(versions) != 1 || versions[0] != from {
		return fmt.Errorf("%w: table %s.%s_schema holds versions %v with version %d tables: the database was written by another version of workrouter",
			ErrSchema, s.schema, s.prefix, versions, from)
	}
	var stmts []string
	if from == 1 {
		stmts = append(stmts,
			`ALTER TABLE `+s.q.fences+` ADD COLUMN topic_id text NOT NULL DEFAULT ''`,
			`ALTER TABLE `+s.q.fences+` ADD COLUMN proof_required boolean NOT NULL DEFAULT false`,
			`ALTER TABLE `+s.q.history+` ADD COLUMN topic_id text NOT NULL DEFAULT ''`,
			`ALTER TABLE `+s.q.history+` ADD COLUMN detail text NOT NULL DEFAULT ''`)
		stmts = append(stmts, s.tableDDL(tables[3:commandIDsTable]...)...)
	}
	if from <= 2 {
		stmts = append(stmts,
			`ALTER TABLE `+s.q.fences+` ADD COLUMN proof_below bigint NOT NULL DEFAULT 0`,
			fmt.Sprintf(`UPDATE %[1]s f SET proof_below = coalesce((SELECT max(h.epoch)::bigint + 1 FROM %[2]s h
			WHERE h.grp = f.grp AND h.topic = f.topic AND h.part = f.part AND h.kind = 'reset' AND h.epoch >= 0), 0)`, s.q.fences, s.q.history))
	}
	if from <= 3 {
		stmts = append(stmts, `ALTER TABLE `+s.q.fences+` ADD COLUMN ids_version bigint NOT NULL DEFAULT 0`,
			`ALTER TABLE `+s.q.fences+` ADD COLUMN duplicates bigint NOT NULL DEFAULT 0`)
		stmts = append(stmts, s.tableDDL(tables[commandIDsTable])...)
	}
	if from <= 4 {
		stmts = append(stmts, `ALTER TABLE `+s.q.fences+` ADD COLUMN gapped boolean NOT NULL DEFAULT false`,
			`ALTER TABLE `+s.q.history+` ADD COLUMN done text NOT NULL DEFAULT ''`)
		stmts = append(stmts, s.tableDDL(tables[doneTable])...)
	} else if from == 5 {
		// Version 5's rows are one span each: a NULL spans column says
		// so.
		stmts = append(stmts, `ALTER TABLE `+pgx.Identifier{s.schema, s.prefix + tables[doneTable].suffix}.Sanitize()+` ADD COLUMN spans bytea`)
	}
	stmts = append(stmts, `UPDATE `+s.q.fences+` SET proof_required = true WHERE proof_below > 0`,
		`ALTER TABLE `+s.q.fences+` DROP COLUMN proof_below`,
		`ALTER TABLE `+s.q.history+` ADD COLUMN proven boolean NOT NULL DEFAULT false`)
	stmts = append(stmts, fmt.Sprintf(`UPDATE %s SET version = %d`, s.q.schema, schemaVersion))
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%w: migrating schema %s from version %d: %w", ErrSchema, s.schema, from, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap(ctx, "open: commit schema migration", err)
	}
	s.log.Info("postgres sink: migrated tables", "schema", s.schema, "prefix", s.prefix, "from", from, "version", schemaVersion)
	return nil
}

// createSchema creates the schema (if needed) and the sink's tables in tx,
// and commits.
func (s *Sink) createSchema(ctx context.Context, tx pgx.Tx) error {
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)`, s.schema).Scan(&exists); err != nil {
		return wrap(ctx, "open: read catalog", err)
	}
	var stmts []string
	if !exists {
		stmts = append(stmts, "CREATE SCHEMA "+pgx.Identifier{s.schema}.Sanitize())
	}
	stmts = append(stmts, s.tableDDL(tables...)...)
	stmts = append(stmts, fmt.Sprintf(`INSERT INTO %s (version) VALUES (%d)`, s.q.schema, schemaVersion))
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			if ctx.Err() != nil {
				return wrap(ctx, "open: create schema", err)
			}
			return fmt.Errorf("%w: cannot create the sink's tables in schema %s: %w", ErrSchema, s.schema, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap(ctx, "open: commit schema", err)
	}
	s.log.Info("postgres sink: created tables", "schema", s.schema, "prefix", s.prefix, "version", schemaVersion)
	return nil
}

// tableDDL returns the statements that create ts, with s's names.
func (s *Sink) tableDDL(ts ...tableSpec) []string {
	var stmts []string
	for _, t := range ts {
		table := pgx.Identifier{s.schema, s.prefix + t.suffix}.Sanitize()
		index := pgx.Identifier{s.prefix + t.suffix + "_scope_idx"}.Sanitize()
		for _, d := range t.ddl {
			stmts = append(stmts, fmt.Sprintf(d, table, index))
		}
	}
	return stmts
}

// sameColumns reports whether a and b are the same columns, in any order:
// a migration appends the columns it adds and drops others in place, so
// a migrated table and a new one may list them in different orders, and
// every statement of the sink names its columns.
func sameColumns(a, b []column) bool {
	byName := func(x, y column) int { return strings.Compare(x.name, y.name) }
	return slices.Equal(slices.SortedFunc(slices.Values(a), byName), slices.SortedFunc(slices.Values(b), byName))
}

func formatColumns(cols []column) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c.name + " " + c.typ
	}
	return strings.Join(parts, ", ")
}
