// Package txstmt finds the statements of an SQL text that control the
// transaction (COMMIT, ROLLBACK, BEGIN, SAVEPOINT …), so that the SQL
// sinks can refuse them in the transaction they hand to handlers: the
// sink ends that transaction itself, after its fence check, and a
// handler's COMMIT would make the effects before it durable whatever the
// check then says.
//
// It reads the text as the server splits it into statements: at the
// semicolons outside string literals, quoted identifiers, dollar-quoted
// strings and comments, and it classifies each statement by its leading
// keywords, after any whitespace and comments. It is not a parser: it
// answers for the statements the server would run, and text that is not
// SQL gets whatever answer its leading words give.
package txstmt

import "strings"

// Dialect is the SQL dialect of a text.
type Dialect int

// The dialects.
const (
	// Postgres is PostgreSQL with standard_conforming_strings on (its
	// default): a backslash escapes only in E'…' strings; block comments
	// nest; $tag$…$tag$ is a string.
	Postgres Dialect = iota
	// PostgresBackslashStrings is PostgreSQL with
	// standard_conforming_strings off: a backslash escapes in every
	// '…' string.
	PostgresBackslashStrings
	// SQLite: block comments do not nest; `…` and […] are identifiers;
	// no backslash escapes, no dollar quotes.
	SQLite
)

// Find returns the leading keywords of the first statement of sql that
// controls the transaction, upper-cased and separated by one space (such
// as "COMMIT", "ROLLBACK TO", "SET TRANSACTION"), and true; or "" and
// false when sql has none. In PostgreSQL those are BEGIN, START
// TRANSACTION, COMMIT (and COMMIT PREPARED), END, ROLLBACK (and ROLLBACK
// TO, ROLLBACK PREPARED), ABORT, SAVEPOINT, RELEASE, PREPARE TRANSACTION,
// SET TRANSACTION and SET SESSION CHARACTERISTICS; in SQLite BEGIN,
// COMMIT, END, ROLLBACK, SAVEPOINT and RELEASE. It may be called from any
// goroutine.
func Find(sql string, d Dialect) (string, bool) {
	l := lexer{src: sql, d: d}
	for l.pos < len(l.src) {
		words := l.leadingWords(4)
		var next byte // the token after the words
		if l.pos < len(l.src) {
			next = l.src[l.pos]
		}
		if k, ok := control(words, next, d); ok {
			return k, true
		}
		l.skipStatement(hasBody(words, d))
	}
	return "", false
}

// hasBody reports whether a statement with the leading words defines a
// routine whose body holds statements between BEGIN and END, separated by
// semicolons that do not end it: in PostgreSQL CREATE [OR REPLACE]
// FUNCTION or PROCEDURE (a BEGIN ATOMIC body), in SQLite CREATE [TEMP]
// TRIGGER. psql splits its input the same way.
func hasBody(words []string, d Dialect) bool {
	if len(words) < 2 || words[0] != "CREATE" {
		return false
	}
	rest := words[1:]
	if d == SQLite {
		if rest[0] == "TEMP" || rest[0] == "TEMPORARY" {
			rest = rest[1:]
		}
		return len(rest) > 0 && rest[0] == "TRIGGER"
	}
	if len(rest) > 1 && rest[0] == "OR" && rest[1] == "REPLACE" {
		rest = rest[2:]
	}
	return len(rest) > 0 && (rest[0] == "FUNCTION" || rest[0] == "PROCEDURE")
}

// control reports whether a statement with the leading words (upper-
// cased; fewer when the statement has fewer before another token, whose
// first byte is next) controls the transaction in dialect d, and the
// words that say so.
func control(words []string, next byte, d Dialect) (string, bool) {
	if len(words) == 0 {
		return "", false
	}
	second := func() string {
		if len(words) > 1 {
			return words[1]
		}
		return ""
	}
	switch words[0] {
	case "BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE":
		if words[0] == "ROLLBACK" && second() == "TO" {
			return "ROLLBACK TO", true
		}
		return words[0], true
	}
	if d == SQLite {
		return "", false
	}
	switch words[0] {
	case "ABORT":
		return "ABORT", true
	case "START":
		return "START TRANSACTION", true
	case "PREPARE":
		// PREPARE TRANSACTION 'gid', not PREPARE name [(types)] AS …
		// with a statement called "transaction".
		if second() == "TRANSACTION" && (len(words) > 2 && words[2] != "AS" || len(words) == 2 && next != '(') {
			return "PREPARE TRANSACTION", true
		}
	case "SET":
		switch {
		case second() == "TRANSACTION":
			return "SET TRANSACTION", true
		case second() == "SESSION" && len(words) > 2 && words[2] == "CHARACTERISTICS":
			return "SET SESSION CHARACTERISTICS", true
		}
	}
	return "", false
}

// lexer walks an SQL text.
type lexer struct {
	src string
	pos int
	d   Dialect
}

// leadingWords skips whitespace and comments, and returns up to n words
// (keywords or plain identifiers, upper-cased) that start the statement
// at pos, stopping at the first other token, which it leaves at pos.
func (l *lexer) leadingWords(n int) []string {
	var words []string
	for len(words) < n {
		l.skipSpace()
		start := l.pos
		for l.pos < len(l.src) && isWordByte(l.src[l.pos], l.pos > start) {
			l.pos++
		}
		if l.pos == start {
			break
		}
		words = append(words, strings.ToUpper(l.src[start:l.pos]))
	}
	return words
}

// isWordByte reports whether c may be part of a word: letters, '_',
// bytes of non-ASCII characters, and after the first byte digits and '$'
// (which PostgreSQL allows inside identifiers).
func isWordByte(c byte, inside bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', c >= 0x80:
		return true
	case inside && (c >= '0' && c <= '9' || c == '$'):
		return true
	}
	return false
}

// skipSpace skips whitespace and comments.
func (l *lexer) skipSpace() {
	for l.pos < len(l.src) {
		switch c := l.src[l.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			l.pos++
		case l.comment():
		default:
			return
		}
	}
}

// comment skips a comment at pos, reporting whether there was one. An
// unterminated comment runs to the end of the text.
func (l *lexer) comment() bool {
	rest := l.src[l.pos:]
	switch {
	case strings.HasPrefix(rest, "--"):
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			l.pos += i + 1
		} else {
			l.pos = len(l.src)
		}
		return true
	case strings.HasPrefix(rest, "/*"):
		depth := 0
		for i := 0; i < len(rest); i++ {
			switch {
			case strings.HasPrefix(rest[i:], "/*") && (depth == 0 || l.d != SQLite):
				depth++
				i++
			case strings.HasPrefix(rest[i:], "*/"):
				depth--
				i++
				if depth == 0 {
					l.pos += i + 1
					return true
				}
			}
		}
		l.pos = len(l.src)
		return true
	}
	return false
}

// skipStatement moves pos past the end of the statement at pos: past its
// terminating semicolon, or to the end of the text. In a statement with a
// body (hasBody), a semicolon between BEGIN and its END, outside
// parentheses, does not end it (a CASE inside the body has an END too).
func (l *lexer) skipStatement(body bool) {
	depth, parens := 0, 0
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == ';' && depth == 0:
			l.pos++
			return
		case c == '(' || c == ')':
			if c == '(' {
				parens++
			} else if parens > 0 {
				parens--
			}
			l.pos++
		case l.comment():
		case c == '\'':
			l.quoted('\'', l.backslashes())
		case c == '"':
			l.quoted('"', false)
		case l.d == SQLite && c == '`':
			l.quoted('`', false)
		case l.d == SQLite && c == '[':
			if i := strings.IndexByte(l.src[l.pos:], ']'); i >= 0 {
				l.pos += i + 1
			} else {
				l.pos = len(l.src)
			}
		case l.d != SQLite && c == '$' && !l.afterWord():
			l.dollarQuoted()
		case isWordByte(c, false):
			// A word, whole: a '$' inside it is not a dollar quote.
			start := l.pos
			l.pos++
			for l.pos < len(l.src) && isWordByte(l.src[l.pos], true) {
				l.pos++
			}
			if body && parens == 0 {
				switch w := l.src[start:l.pos]; {
				case strings.EqualFold(w, "BEGIN"):
					depth++
				case strings.EqualFold(w, "CASE") && depth > 0:
					depth++
				case strings.EqualFold(w, "END") && depth > 0:
					depth--
				}
			}
		default:
			l.pos++
		}
	}
}

// backslashes reports whether a backslash escapes in the string literal
// whose quote is at pos: always with PostgresBackslashStrings, and in an
// E'…' string (an E or e that is a word of its own, right before the
// quote).
func (l *lexer) backslashes() bool {
	switch l.d {
	case PostgresBackslashStrings:
		return true
	case SQLite:
		return false
	}
	p := l.pos
	return p > 0 && (l.src[p-1] == 'E' || l.src[p-1] == 'e') && (p == 1 || !isWordByte(l.src[p-2], true))
}

// afterWord reports whether the byte before pos belongs to a word.
func (l *lexer) afterWord() bool {
	return l.pos > 0 && isWordByte(l.src[l.pos-1], true)
}

// quoted skips the literal or identifier quoted with q at pos (a doubled
// q is part of it; with esc, so is a backslash and the byte after it). An
// unterminated one runs to the end of the text.
func (l *lexer) quoted(q byte, esc bool) {
	for i := l.pos + 1; i < len(l.src); i++ {
		switch c := l.src[i]; {
		case esc && c == '\\':
			i++
		case c == q:
			if i+1 < len(l.src) && l.src[i+1] == q {
				i++
				continue
			}
			l.pos = i + 1
			return
		}
	}
	l.pos = len(l.src)
}

// dollarQuoted skips a dollar-quoted string at pos ($$…$$ or
// $tag$…$tag$), or only the '$' when none starts there (a parameter such
// as $1). An unterminated one runs to the end of the text.
func (l *lexer) dollarQuoted() {
	rest := l.src[l.pos:]
	end := 1
	for end < len(rest) && isWordByte(rest[end], end > 1) && rest[end] != '$' {
		end++
	}
	if end >= len(rest) || rest[end] != '$' {
		l.pos++
		return
	}
	tag := rest[:end+1]
	if i := strings.Index(rest[len(tag):], tag); i >= 0 {
		l.pos += len(tag) + i + len(tag)
	} else {
		l.pos = len(l.src)
	}
}
