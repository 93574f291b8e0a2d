package sqlite_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/sink/sqlite"
)

// TestOpenSaysWhyAPathIsRefused: a file: URI is refused as what it is,
// not as an in-memory database (file:x.db?mode=ro used to be reported as
// in-memory).
func TestOpenSaysWhyAPathIsRefused(t *testing.T) {
	for path, want := range map[string]string{
		"file:x.db?mode=ro": "is a file: URI",
		"file:x.db":         "is a file: URI",
		":memory:":          "in-memory database",
	} {
		_, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
		if !errors.Is(err, sqlite.ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): %v, want ErrConfig saying %q", path, err, want)
		}
		if strings.HasPrefix(path, "file:") && strings.Contains(err.Error(), "memory") {
			t.Errorf("Open(%q): %v mentions memory", path, err)
		}
	}
}
