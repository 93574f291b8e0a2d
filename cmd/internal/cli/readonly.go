package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/workrouter/workrouter/admin"
)

// openAdminReadOnly opens the sink for the commands that only read it
// (fences list, fences history, status --sink, dlq list, dlq show). It never changes the
// database: SQLite is opened read-only (no file, table or -wal file
// created, the journal mode left alone), PostgreSQL in read-only sessions
// with no schema or table created. A database without the sink's tables
// is an error that says so (matching sqlite.ErrNoSchema or
// postgres.ErrNoSchema). For PostgreSQL, a search_path in the DSN names
// the schema of the sink's tables, as for the worker. Close it with the
// returned func.
func openAdminReadOnly(ctx context.Context, spec sinkSpec) (adminSink, func() error, error) {
	return openAdminSink(ctx, spec, true)
}

// sqliteFileExists fails unless spec's SQLite file exists and is a file:
// an admin command never creates an empty sink at a mistyped path.
func sqliteFileExists(spec sinkSpec) error {
	st, err := os.Stat(spec.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sink %s: no such file (a worker creates it on first use)", spec)
	case err != nil:
		return fmt.Errorf("sink %s: %w", spec, err)
	case st.IsDir():
		return fmt.Errorf("sink %s: is a directory, want an SQLite database file", spec)
	}
	return nil
}

// errTopicMissing is matched by the error admin.Status returns when the
// topic does not exist.
var errTopicMissing = admin.ErrTopicMissing

// topicMissingError is status's one line about a topic that does not
// exist: where it looked, what the group's workers do meanwhile, and the
// fix.
func topicMissingError(topic, group string, brokers []string) error {
	return fmt.Errorf("topic %q does not exist on %s: the workers of group %q wait for it, consume nothing and log "+
		"\"topic does not exist\"; create it (kafka-topics.sh --create --topic %s, or workrouter-lab broker --topic %s for the embedded broker), or check --topic and --brokers",
		topic, strings.Join(brokers, ","), group, topic, topic)
}
