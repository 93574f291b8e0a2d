package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ErrReadOnly is matched by the errors the writing methods (Claim, Apply,
// ResetFence) of a [Sink] opened with [Config.ReadOnly] return: such a
// Sink only reads.
var ErrReadOnly = errors.New("sqlite: sink opened read-only")

// ErrNoSchema is matched by the error [Open] returns, with
// [Config.ReadOnly], for a database that holds none of the sink's tables:
// a read-only Open reports it and creates nothing. The database may be
// another application's, or a worker may not have run on it yet.
var ErrNoSchema = errors.New("sqlite: the database holds no workrouter sink tables")

// ErrChangedDuringRead is matched by the error [Sink.Close] returns for a
// read-only Sink that read a WAL database without locks (see
// [Config.ReadOnly]) when another process changed the file while the Sink
// was open: what it read may mix the states before and after. Read again.
var ErrChangedDuringRead = errors.New("sqlite: the database file changed while it was read without locks")

// walHeader reports whether the SQLite database file at path is in WAL
// mode, from its header (bytes 18 and 19 are 2 for WAL). A file too short
// for a header (an empty database) is not.
func walHeader(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var h [100]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return false, nil
		}
		return false, err
	}
	if !bytes.HasPrefix(h[:], []byte("SQLite format 3\x00")) {
		return false, nil // not a database: the first query says so
	}
	return h[18] == 2 && h[19] == 2, nil
}

// readOnlyDSN returns the driver name of a read-only connection to
// c.Path, and whether it reads without locks (immutable).
//
// A read-only connection never creates the database, never changes its
// journal mode, and every write on it fails (mode=ro, and query_only as
// well). One catch remains: SQLite cannot read a WAL database without its
// -wal and -shm files, and a read-only connection creates them when they
// are missing and cannot remove them when it closes. They are missing
// exactly when no connection has the database open (the last one to close
// checkpoints and removes them). In that case the database file holds
// every committed transaction, and it is read as an immutable file, with
// no lock and no -wal or -shm file, so that reading it leaves the
// directory as it found it. A writer that opens the database meanwhile
// writes to a new -wal file that this connection does not see, which is a
// consistent snapshot from before it; only a checkpoint into the database
// file during the read could mix two states, and Close reports that
// (ErrChangedDuringRead).
func (c Config) readOnlyDSN() (dsn string, immutable bool, err error) {
	wal, err := walHeader(c.Path)
	if err != nil {
		return "", false, fmt.Errorf("%w: cannot read %q: %w", ErrConfig, c.Path, err)
	}
	if wal {
		_, err := os.Stat(c.Path + "-wal")
		switch {
		case errors.Is(err, fs.ErrNotExist):
			immutable = true
		case err != nil:
			return "", false, fmt.Errorf("%w: %q: %w", ErrConfig, c.Path+"-wal", err)
		}
	}
	q := url.Values{}
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	}
	q.Set("_query_only", "1")
	q.Set("_busy_timeout", strconv.FormatInt(max(c.BusyTimeout.Milliseconds(), 1), 10))
	// A URI path: '%' and '#' must be escaped ('?' is refused by Config).
	path := strings.NewReplacer("%", "%25", "#", "%23").Replace(filepath.Clean(c.Path))
	return "file:" + path + "?" + q.Encode(), immutable, nil
}

// fileState is what Close compares to tell whether a database file read
// without locks changed meanwhile.
type fileState struct {
	size int64
	mod  time.Time
}

func statFile(path string) (fileState, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileState{}, err
	}
	return fileState{size: fi.Size(), mod: fi.ModTime()}, nil
}

// unchangedSince returns the check Close runs for a Sink that reads
// without locks: the database file must still have the size and
// modification time it had when the Sink opened it.
func unchangedSince(path string) (func() error, error) {
	before, err := statFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrConfig, path, err)
	}
	return func() error {
		after, err := statFile(path)
		if err != nil || after.size != before.size || !after.mod.Equal(before.mod) {
			return fmt.Errorf("%w: %q", ErrChangedDuringRead, path)
		}
		return nil
	}, nil
}

// initReadOnly checks, without writing anything, that the database holds
// the sink's tables in this package's schema version, and prepares the
// statements. A database without any of them fails with ErrNoSchema, one
// with some of them with ErrSchema.
func (s *Sink) initReadOnly(ctx context.Context) error {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.openErr(ctx, err)
	}
	defer tx.Rollback() //nolint:errcheck // a read-only transaction: nothing to keep
	defs := s.tableDefs()
	tables := map[string]table{}
	var missing, names []string
	for _, d := range defs {
		names = append(names, d.name)
		t, err := s.readTable(ctx, tx, d.name)
		if err != nil {
			return err
		}
		tables[d.name] = t
		if !t.exists {
			missing = append(missing, d.name)
		}
	}
	switch {
	case len(missing) == len(defs):
		return fmt.Errorf("%w: %q has none of the tables %s (a worker creates them on first use; a read-only open never does)",
			ErrNoSchema, s.cfg.Path, strings.Join(names, ", "))
	case s.oldVersion(tables) != 0:
		return fmt.Errorf("%w: %q holds schema version %d; a read-only open cannot migrate it to version %d (opening it read-write once, as a worker does, migrates it)",
			ErrSchema, s.cfg.Path, s.oldVersion(tables), SchemaVersion)
	case len(missing) > 0:
		return fmt.Errorf("%w: incomplete schema in %q: table(s) %s missing while the sink's other tables exist",
			ErrSchema, s.cfg.Path, strings.Join(missing, ", "))
	}
	for _, d := range defs {
		if err := s.checkTable(d, tables[d.name]); err != nil {
			return err
		}
	}
	if err := s.checkVersion(ctx, tx, SchemaVersion); err != nil {
		return err
	}
	if err := s.prepare(ctx); err != nil {
		return s.wrap(ctx, "prepare statements", err)
	}
	s.log.Info("sqlite sink opened read-only", "path", s.cfg.Path, "prefix", s.cfg.Prefix)
	return nil
}

// writable fails with ErrReadOnly for a read-only Sink; op names the
// refused operation.
func (s *Sink) writable(op string) error {
	if s.cfg.ReadOnly {
		return fmt.Errorf("sqlite: %s: %w", op, ErrReadOnly)
	}
	return nil
}
