package postgres

import (
	"fmt"
	"net/url"
	"os"
	"strings"
)

// dsnParts are the settings a DSN gives itself (not from libpq's
// defaults): whether it names a host, a user and a database, or a
// service (pg_service.conf), which may name all three.
type dsnParts struct {
	host, user, database, service bool
}

// checkDSN fails with an error matching ErrConfig unless the DSN, or the
// libpq environment variables (PGHOST, PGUSER, PGDATABASE, PGSERVICE),
// name the host, the user and the database: without them libpq's
// defaults connect to the local Unix socket as the operating system's
// user, to a database named after it, which is never the sink an
// operator meant. The error never repeats the DSN (it may hold a
// password).
func checkDSN(dsn string) error {
	p := dsnGiven(dsn)
	env := func(name string) bool { return os.Getenv(name) != "" }
	if p.service || env("PGSERVICE") {
		return nil
	}
	var missing []string
	if !p.host && !env("PGHOST") {
		missing = append(missing, "host (postgres://USER@HOST/DB, host=… or PGHOST)")
	}
	if !p.user && !env("PGUSER") {
		missing = append(missing, "user (postgres://USER@HOST/DB, user=… or PGUSER)")
	}
	if !p.database && !env("PGDATABASE") {
		missing = append(missing, "database (postgres://USER@HOST/DB, dbname=… or PGDATABASE)")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the DSN names no %s: libpq's defaults (the local socket, the operating system's user, a database named after it) are not taken for a sink",
			ErrConfig, strings.Join(missing, ", no "))
	}
	return nil
}

// dsnGiven reports which settings dsn gives, in the URL form
// (postgres://…, postgresql://…) or the keyword/value form, as pgx reads
// them. It is lenient: the DSN has been parsed by pgx already.
func dsnGiven(dsn string) dsnParts {
	var p dsnParts
	set := func(key, value string) {
		if value == "" {
			return
		}
		switch key {
		case "host", "hostaddr":
			p.host = true
		case "user":
			p.user = true
		case "dbname", "database":
			p.database = true
		case "service":
			p.service = true
		}
	}
	rest, ok := strings.CutPrefix(dsn, "postgresql://")
	if !ok {
		rest, ok = strings.CutPrefix(dsn, "postgres://")
	}
	if !ok {
		for key, value := range keywordValues(dsn) {
			set(key, value)
		}
		return p
	}
	rest, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		user, _, _ := strings.Cut(rest[:i], ":")
		set("user", user)
		rest = rest[i+1:]
	}
	hosts, db, _ := strings.Cut(rest, "/")
	for h := range strings.SplitSeq(hosts, ",") {
		if strings.HasPrefix(h, "[") {
			if end := strings.IndexByte(h, ']'); end > 1 {
				set("host", h[1:end])
			}
			continue
		}
		host, _, _ := strings.Cut(h, ":")
		set("host", host)
	}
	set("database", db)
	if q, err := url.ParseQuery(query); err == nil {
		for key, values := range q {
			for _, v := range values {
				set(key, v)
			}
		}
	}
	return p
}

// keywordValues returns the settings of a keyword/value DSN
// ("host=h user=u dbname=d"), with quoted values ('…', backslash escapes)
// as libpq reads them.
func keywordValues(s string) map[string]string {
	const space = " \t\n\r\v\f"
	out := map[string]string{}
	s = strings.TrimLeft(s, space)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key := strings.Trim(s[:eq], space)
		s = strings.TrimLeft(s[eq+1:], space)
		var b strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		i := 0
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				b.WriteByte(s[i])
				continue
			}
			if (quoted && c == '\'') || (!quoted && strings.IndexByte(space, c) >= 0) {
				break
			}
			b.WriteByte(c)
		}
		if quoted && i < len(s) {
			i++ // the closing quote
		}
		out[key] = b.String()
		s = strings.TrimLeft(s[i:], space)
	}
	return out
}
