package processtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// The worker child is this test binary re-executed with envChild=1. Its
// configuration and fault hooks come from the environment; it reports what
// it does on stdout, one event per line, for the test to wait on.
const (
	envChild   = "WR_PROCESSTEST_CHILD"
	envBrokers = "WR_BROKERS"
	envTopic   = "WR_TOPIC"
	envGroup   = "WR_GROUP"
	envSink    = "WR_SINK"   // "sqlite:PATH" or a postgres:// DSN
	envSchema  = "WR_SCHEMA" // PostgreSQL schema of the sink and the effects table
	envName    = "WR_NAME"
	envHook    = "WR_HOOK"       // "kind:N": fire at the Nth Apply call
	envGate    = "WR_GATE"       // file the "gate" hook waits for
	envBusy    = "WR_BUSY_MS"    // SQLite busy timeout
	envSession = "WR_SESSION_MS" // group session timeout
)

// Hook kinds.
const (
	hookStopBeforeApply  = "stop-before-apply"  // SIGSTOP itself right before the Apply call
	hookHangBeforeCommit = "hang-before-commit" // block inside the last effect of the batch (transaction open)
	hookHangAfterCommit  = "hang-after-commit"  // block after the sink committed, before the Kafka commit
	hookGate             = "gate"               // print the session's backend pid inside the batch, wait for the gate file
)

type say func(format string, args ...any)

func childMain() int {
	var mu sync.Mutex
	out := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := child(ctx, out); err != nil {
		out("ERROR %v", err)
		return 1
	}
	out("EXIT clean")
	return 0
}

func child(ctx context.Context, out say) error {
	spec := os.Getenv(envSink)
	switch {
	case strings.HasPrefix(spec, "sqlite:"):
		busy := 30 * time.Second
		if ms, err := strconv.Atoi(os.Getenv(envBusy)); err == nil {
			busy = time.Duration(ms) * time.Millisecond
		}
		s, err := sqlite.Open(ctx, sqlite.Config{Path: strings.TrimPrefix(spec, "sqlite:"), BusyTimeout: busy})
		if err != nil {
			return err
		}
		defer s.Close()
		if _, err := s.DB().ExecContext(ctx, sqliteEffectsDDL); err != nil {
			return fmt.Errorf("effects table: %w", err)
		}
		exec := func(ctx context.Context, tx *sqlite.Tx, e effect) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects(k, seq, part, off, epoch, member) VALUES (?, ?, ?, ?, ?, ?)`,
				e.key, e.seq, e.part, e.off, e.epoch, e.member)
			return err
		}
		return runWorker[*sqlite.Tx](ctx, s, exec, nil, out)
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		s, err := postgres.Open(ctx, postgres.Config{DSN: spec, Schema: os.Getenv(envSchema), IdleInTxTimeout: 10 * time.Second})
		if err != nil {
			return err
		}
		defer s.Close()
		exec := func(ctx context.Context, tx pgx.Tx, e effect) error {
			_, err := tx.Exec(ctx, `INSERT INTO effects(k, seq, part, off, epoch, member) VALUES ($1, $2, $3, $4, $5, $6)`,
				e.key, e.seq, e.part, e.off, e.epoch, e.member)
			return err
		}
		pid := func(ctx context.Context, tx pgx.Tx) (int, error) {
			var pid int
			err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid)
			return pid, err
		}
		return runWorker[pgx.Tx](ctx, s, exec, pid, out)
	}
	return fmt.Errorf("unknown sink %q", spec)
}

type effect struct {
	key    string
	seq    int
	part   int32
	off    int64
	epoch  int32
	member string
}

func runWorker[Tx any](ctx context.Context, s sink.Sink[Tx], exec func(context.Context, Tx, effect) error,
	backendPID func(context.Context, Tx) (int, error), out say) error {
	session := 2 * time.Second
	if ms, err := strconv.Atoi(os.Getenv(envSession)); err == nil {
		session = time.Duration(ms) * time.Millisecond
	}
	h := &hooked[Tx]{Sink: s, out: out, backendPID: backendPID}
	if spec := os.Getenv(envHook); spec != "" {
		kind, n, _ := strings.Cut(spec, ":")
		h.kind = kind
		h.at, _ = strconv.ParseInt(n, 10, 64)
	}
	if h.kind == hookStopBeforeApply {
		// Freeze between transactions: a process frozen inside an SQLite
		// transaction would hold the write lock and stall every other
		// writer until it resumed (see internal/faults).
		h.Sink = faults.FreezeBeforeBatch(s, h.at, func(tok epochs.Token, offsets []int64) {
			out("HOOK %s part=%d epoch=%d first=%d last=%d", hookStopBeforeApply, tok.Partition, tok.Epoch, offsets[0], offsets[len(offsets)-1])
		})
	}
	handler := func(ctx context.Context, tx Tx, cmd consumer.Command) error {
		seq, err := strconv.Atoi(string(cmd.Payload))
		if err != nil {
			return fmt.Errorf("payload %q: %w", cmd.Payload, err)
		}
		return exec(ctx, tx, effect{key: string(cmd.Key), seq: seq, part: cmd.Token.Partition, off: cmd.Offset,
			epoch: cmd.Token.Epoch, member: cmd.Token.Member})
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", os.Getenv(envName))
	w, err := consumer.New(ctx, consumer.Config[Tx]{
		Brokers:           strings.Split(os.Getenv(envBrokers), ","),
		Group:             os.Getenv(envGroup),
		Topic:             os.Getenv(envTopic),
		Sink:              h,
		Handlers:          map[string]consumer.Handler[Tx]{"effect": handler},
		MaxBatch:          64,
		SessionTimeout:    session,
		HeartbeatInterval: 200 * time.Millisecond,
		RebalanceTimeout:  5 * time.Second,
		RevokeTimeout:     5 * time.Second,
		RetryBackoff:      20 * time.Millisecond,
		MaxRetryBackoff:   500 * time.Millisecond,
		ClientID:          os.Getenv(envName),
		Logger:            logger,
		Observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			var fe *sink.FencedError
			if f, ok := e.(consumer.Fenced); ok && errors.As(f.Err, &fe) {
				out("FENCED op=%s part=%d offered=%d stored=%d stored_member=%s", fe.Op, fe.Offered.Partition, fe.Offered.Epoch, fe.Stored.Epoch, fe.Stored.Member)
			}
		})},
	})
	if err != nil {
		return err
	}
	out("STARTED")
	<-ctx.Done()
	return w.Close()
}

// hooked wraps the sink to report claims and applies and to fire the
// configured fault hook.
type hooked[Tx any] struct {
	sink.Sink[Tx]
	out        say
	kind       string
	at         int64
	n          atomic.Int64
	backendPID func(context.Context, Tx) (int, error)
}

func (h *hooked[Tx]) Claim(ctx context.Context, tok epochs.Token) (int64, error) {
	next, err := h.Sink.Claim(ctx, tok)
	if err == nil {
		h.out("CLAIM part=%d epoch=%d member=%s next=%d", tok.Partition, tok.Epoch, tok.Member, next)
	}
	return next, err
}

func (h *hooked[Tx]) Apply(ctx context.Context, tok epochs.Token, offsets []int64, eff sink.Effect[Tx]) (sink.ApplyResult, error) {
	n := h.n.Add(1)
	fire := h.kind != "" && n == h.at
	desc := fmt.Sprintf("part=%d epoch=%d first=%d last=%d", tok.Partition, tok.Epoch, offsets[0], offsets[len(offsets)-1])
	wrapped := eff
	if fire && (h.kind == hookHangBeforeCommit || h.kind == hookGate) {
		wrapped = func(ctx context.Context, tx Tx, i int) error {
			if err := eff(ctx, tx, i); err != nil || i != len(offsets)-1 {
				return err
			}
			switch h.kind {
			case hookHangBeforeCommit:
				h.out("HOOK %s %s", h.kind, desc)
				select {} // the test SIGKILLs this process with the transaction open
			case hookGate:
				pid := 0
				if h.backendPID != nil {
					pid, _ = h.backendPID(ctx, tx)
				}
				h.out("HOOK %s %s pid=%d", h.kind, desc, pid)
				for {
					if _, err := os.Stat(os.Getenv(envGate)); err == nil {
						return nil
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			return nil
		}
	}
	res, err := h.Sink.Apply(ctx, tok, offsets, wrapped)
	switch {
	case err == nil:
		h.out("APPLIED %s applied=%d next=%d", desc, res.Applied, res.NextOffset)
		if fire && h.kind == hookHangAfterCommit {
			h.out("HOOK %s %s", h.kind, desc)
			select {} // committed in the sink; the Kafka commit never comes
		}
	case !errors.Is(err, sink.ErrFenced):
		h.out("APPLY-ERROR %s err=%q", desc, err.Error())
	}
	return res, err
}

const sqliteEffectsDDL = `CREATE TABLE IF NOT EXISTS effects(
	k TEXT NOT NULL, seq INTEGER NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL,
	epoch INTEGER NOT NULL, member TEXT NOT NULL)`
