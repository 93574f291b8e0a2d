package jsonl

import (
	"encoding/json"
	"slices"
	"unicode/utf8"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
)

// parseFast decodes the common shape of a line without encoding/json's
// reflection (its cost per line is in docs/performance.md): an object whose fields are spelt exactly, each at most
// once, whose strings have no escapes, no control characters and valid
// UTF-8, and whose headers are an object of such strings. Anything else
// (an escape, a field spelt in another case, a repeated field, a syntax
// error) returns ok false, and ParseLine decodes the line with
// encoding/json, which also words every error; so the two agree on every
// line parseFast accepts (FuzzParseLine checks that they do). line has no
// surrounding space. The command is not validated.
func parseFast(line []byte) (c router.Command, ok bool) {
	p := fastParser{b: line}
	if !p.byte('{') {
		return c, false
	}
	var (
		seen            [5]bool
		key, typ, id    []byte
		payload         []byte
		payloadIsString bool
		hdrs            []envelope.Header
	)
	p.space()
	if p.peek() == '}' {
		p.i++
	} else {
		for {
			name, ok := p.str()
			if !ok || !p.colon() {
				return c, false
			}
			var field int
			switch string(name) {
			case "key":
				field = 0
				key, ok = p.str()
			case "type":
				field = 1
				typ, ok = p.str()
			case "id":
				field = 2
				id, ok = p.str()
			case "payload":
				field = 3
				if p.peek() == '"' {
					payload, ok = p.str()
					payloadIsString = true
				} else {
					payload, ok = p.value()
				}
			case "headers":
				field = 4
				hdrs, ok = p.headers()
			default:
				return c, false
			}
			if !ok || seen[field] {
				return c, false
			}
			seen[field] = true
			p.space()
			if p.byte(',') {
				p.space()
				continue
			}
			if !p.byte('}') {
				return c, false
			}
			break
		}
	}
	if p.i != len(line) {
		return c, false
	}
	// One allocation for the bytes the command owns.
	buf := make([]byte, 0, len(key)+len(payload))
	buf = append(buf, key...)
	buf = append(buf, payload...)
	c.Key = buf[:len(key):len(key)]
	if !payloadIsString && string(payload) == "null" {
		payload = nil
	}
	if len(payload) > 0 {
		c.Payload = buf[len(key):]
	}
	c.Type, c.ID = string(typ), string(id)
	if len(hdrs) > 0 {
		slices.SortFunc(hdrs, func(a, b envelope.Header) int {
			switch {
			case a.Key < b.Key:
				return -1
			case a.Key > b.Key:
				return 1
			}
			return 0
		})
		c.Headers = hdrs
	}
	return c, true
}

// fastParser is parseFast's cursor.
type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) peek() byte {
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c if it is next.
func (p *fastParser) byte(c byte) bool {
	if p.peek() == c {
		p.i++
		return true
	}
	return false
}

func (p *fastParser) colon() bool {
	p.space()
	if !p.byte(':') {
		return false
	}
	p.space()
	return true
}

// str reads a string without escapes or control characters, in valid
// UTF-8, and returns its contents (a slice of the line).
func (p *fastParser) str() ([]byte, bool) {
	if !p.byte('"') {
		return nil, false
	}
	start, ascii := p.i, true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, ascii || utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		p.i++
	}
	return nil, false
}

// value reads a JSON value other than a string: its extent is found by
// nesting, then checked with json.Valid.
func (p *fastParser) value() ([]byte, bool) {
	start, depth := p.i, 0
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch c {
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return p.valid(start)
			}
			depth--
		case ',':
			if depth == 0 {
				return p.valid(start)
			}
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return p.valid(start)
			}
		case '"':
			// Skip the string, escapes included: json.Valid judges it.
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
		}
		p.i++
	}
	return nil, false
}

func (p *fastParser) valid(start int) ([]byte, bool) {
	v := p.b[start:p.i]
	return v, len(v) > 0 && json.Valid(v)
}

// headers reads an object of string values, or null.
func (p *fastParser) headers() ([]envelope.Header, bool) {
	if p.peek() == 'n' {
		if len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
			p.i += 4
			return nil, true
		}
		return nil, false
	}
	if !p.byte('{') {
		return nil, false
	}
	p.space()
	var hs []envelope.Header
	if p.byte('}') {
		return hs, true
	}
	for {
		k, ok := p.str()
		if !ok || !p.colon() {
			return nil, false
		}
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		for _, h := range hs {
			if h.Key == string(k) {
				return nil, false // encoding/json keeps the last: let it decide
			}
		}
		hs = append(hs, envelope.Header{Key: string(k), Value: []byte(string(v))})
		p.space()
		if p.byte(',') {
			p.space()
			continue
		}
		if !p.byte('}') {
			return nil, false
		}
		return hs, true
	}
}
