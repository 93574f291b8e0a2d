package txstmt

import "testing"

func TestFind(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		d    Dialect
		want string // "" for none
	}{
		// Every transaction-control statement of PostgreSQL.
		{"COMMIT", Postgres, "COMMIT"},
		{"commit", Postgres, "COMMIT"},
		{"Commit;", Postgres, "COMMIT"},
		{"COMMIT AND CHAIN", Postgres, "COMMIT"},
		{"COMMIT PREPARED 'x'", Postgres, "COMMIT"},
		{"END", Postgres, "END"},
		{"end transaction", Postgres, "END"},
		{"ROLLBACK", Postgres, "ROLLBACK"},
		{"ROLLBACK PREPARED 'x'", Postgres, "ROLLBACK"},
		{"rollback to savepoint a", Postgres, "ROLLBACK TO"},
		{"ROLLBACK /* c */ TO a", Postgres, "ROLLBACK TO"},
		{"ABORT", Postgres, "ABORT"},
		{"BEGIN", Postgres, "BEGIN"},
		{"begin isolation level serializable", Postgres, "BEGIN"},
		{"START TRANSACTION", Postgres, "START TRANSACTION"},
		{"SAVEPOINT a", Postgres, "SAVEPOINT"},
		{"RELEASE SAVEPOINT a", Postgres, "RELEASE"},
		{"release a", Postgres, "RELEASE"},
		{"PREPARE TRANSACTION 'gid'", Postgres, "PREPARE TRANSACTION"},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", Postgres, "SET TRANSACTION"},
		{"set transaction snapshot '00000003-1'", Postgres, "SET TRANSACTION"},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", Postgres, "SET SESSION CHARACTERISTICS"},
		// Leading whitespace and comments, case.
		{"  \n\tCoMmIt", Postgres, "COMMIT"},
		{"/* a comment */ COMMIT", Postgres, "COMMIT"},
		{"/* nested /* comment */ still */ COMMIT", Postgres, "COMMIT"},
		{"-- a comment\nCOMMIT", Postgres, "COMMIT"},
		{"COMMIT/**/", Postgres, "COMMIT"},
		// Several statements.
		{"INSERT INTO kv VALUES ('k', 'v'); COMMIT", Postgres, "COMMIT"},
		{"SELECT 1;COMMIT;BEGIN", Postgres, "COMMIT"},
		{"SELECT 1; ; -- c\n /* d */ commit", Postgres, "COMMIT"},
		{"SELECT a$b$c; COMMIT", Postgres, "COMMIT"}, // $ inside a word is no dollar quote
		{"SELECT $1; COMMIT", Postgres, "COMMIT"},
		{`SELECT 'a\'; COMMIT; --'`, Postgres, "COMMIT"}, // standard strings: 'a\' ends at the second quote
		// Not transaction control: inside literals, identifiers,
		// comments, dollar quotes, or not a statement's first word.
		{"SELECT 'x; COMMIT'", Postgres, ""},
		{"SELECT 'it''s; COMMIT'", Postgres, ""},
		{`SELECT E'\'; COMMIT'`, Postgres, ""},
		{`SELECT e'\\'; SELECT 1`, Postgres, ""},
		{`SELECT 'a\'; COMMIT; --'`, PostgresBackslashStrings, ""},
		{`SELECT "x; COMMIT"`, Postgres, ""},
		{`SELECT "a""; COMMIT"`, Postgres, ""},
		{"SELECT $$; COMMIT$$", Postgres, ""},
		{"SELECT $tag$; COMMIT $x$ $tag$", Postgres, ""},
		{"SELECT 1 -- ; COMMIT", Postgres, ""},
		{"SELECT 1 /* ; COMMIT */", Postgres, ""},
		{"SELECT 1 /* /* */ ; COMMIT */", Postgres, ""},
		{"SELECT commit FROM t", Postgres, ""},
		{"UPDATE t SET begin = 1", Postgres, ""},
		{"COMMITTED", Postgres, ""},
		{`"COMMIT"`, Postgres, ""},
		{"PREPARE p AS SELECT 1", Postgres, ""},
		{"PREPARE transaction AS SELECT 1", Postgres, ""},
		{"PREPARE transaction (int) AS SELECT $1", Postgres, ""},
		{"SET search_path = x", Postgres, ""},
		{"SET LOCAL lock_timeout = 10", Postgres, ""},
		{"DO $$ BEGIN PERFORM 1; END $$", Postgres, ""},
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT 1; END; SELECT 2", Postgres, ""},
		{"CREATE OR REPLACE PROCEDURE p() LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; COMMIT", Postgres, "COMMIT"},
		{"", Postgres, ""},
		{"   ", Postgres, ""},
		{"WITH x AS (SELECT 1) SELECT * FROM x", Postgres, ""},
		// SQLite.
		{"COMMIT", SQLite, "COMMIT"},
		{"end", SQLite, "END"},
		{"BEGIN IMMEDIATE", SQLite, "BEGIN"},
		{"ROLLBACK TO a", SQLite, "ROLLBACK TO"},
		{"SAVEPOINT a", SQLite, "SAVEPOINT"},
		{"RELEASE a", SQLite, "RELEASE"},
		{"INSERT INTO kv VALUES ('k', 'v'); COMMIT", SQLite, "COMMIT"},
		{"/* a /* b */ COMMIT", SQLite, "COMMIT"}, // SQLite's comments do not nest
		{"SELECT [a;COMMIT]", SQLite, ""},
		{"SELECT `a;COMMIT`", SQLite, ""},
		{`SELECT 'a\'; COMMIT`, SQLite, "COMMIT"}, // no backslash escapes
		{"ABORT", SQLite, ""},                     // not a statement in SQLite
		{"SET TRANSACTION READ ONLY", SQLite, ""},
		{"CREATE TRIGGER t AFTER INSERT ON kv BEGIN UPDATE n SET c = c + 1; END; SELECT 1", SQLite, ""},
		{"CREATE TEMP TRIGGER t AFTER INSERT ON kv BEGIN SELECT CASE WHEN 1 THEN 1 END; END; ROLLBACK", SQLite, "ROLLBACK"},
	} {
		got, ok := Find(tc.sql, tc.d)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("Find(%q, %d) = %q, %v; want %q", tc.sql, tc.d, got, ok, tc.want)
		}
	}
}
