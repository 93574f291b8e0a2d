package jsonl

import "github.com/workrouter/workrouter/router"

// ParseFastForTest is parseFast, for FuzzParseLine.
func ParseFastForTest(line []byte) (router.Command, bool) { return parseFast(line) }

// ParseSlowForTest is parseSlow, validated as ParseLine validates.
func ParseSlowForTest(line []byte) (router.Command, error) { return parseSlow(line) }
