package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/router"
)

// ErrTakeover is matched by the error W6Process returns when the takeover
// did not happen as set up (the paused worker never stopped, or the first
// write after the pause was not the new owner's).
var ErrTakeover = errors.New("bench: W6 takeover")

// W6Process is W6, pause-to-takeover, with real worker processes: two
// `workrouter worker --example ledger` processes (env.Worker) on an
// SQLite sink share a fresh one-partition topic with session timeout
// W6SessionTimeout and a 200ms heartbeat. When the first owns the
// partition and the second has joined, the first is frozen with SIGSTOP
// and one command is produced. The measured time runs from the SIGSTOP to
// the moment the command's posting is visible in the sink, written by the
// second worker (polled every 2ms). Records is 1. It needs the embedded
// broker (Skipped otherwise).
func W6Process(ctx context.Context, env *Env) (Result, error) {
	const id = "W6"
	name := fmt.Sprintf("pause-to-takeover, SIGSTOP of a worker process, session timeout %s, SQLite sink", W6SessionTimeout)
	fail := func(err error) (Result, error) { return Result{ID: id, Name: name}, err }
	if Cluster(env) == nil {
		return Result{ID: id, Name: name, Skipped: "needs the embedded broker: a real broker's group.min.session.timeout.ms is above " + W6SessionTimeout.String()}, nil
	}
	topic, drop, err := createTopic(ctx, env, "bench-w6", 1)
	if err != nil {
		return fail(err)
	}
	defer drop()
	store, err := cluster.OpenStore(ctx, cluster.StoreConfig{SQLitePath: filepath.Join(env.TempDir, UniqueName("w6")+".db")})
	if err != nil {
		return fail(err)
	}
	defer store.Close()
	group := UniqueName("bench-w6")
	opts := func(name string) []string {
		return cluster.WorkerOptions{Brokers: env.Brokers, Topic: topic, Group: group, SinkSpec: store.WorkerSpec(name),
			Name: name, SessionTimeout: W6SessionTimeout, RebalanceTimeout: 2 * W6SessionTimeout}.Args()
	}
	var workers []*cluster.Worker
	defer func() { cluster.StopAll(workers, 5*time.Second) }()
	a, err := cluster.StartWorker("w6-a", env.Worker, nil, opts("w6-a")...)
	if err != nil {
		return fail(err)
	}
	workers = append(workers, a)
	if err := pollUntil(ctx, 30*time.Second, func() bool { _, ok := a.Owned()[0]; return ok }); err != nil {
		return fail(fmt.Errorf("%w: the first worker never claimed the partition (%s): %w", ErrTakeover, a.LastErr(), err))
	}
	b, err := cluster.StartWorker("w6-b", env.Worker, nil, opts("w6-b")...)
	if err != nil {
		return fail(err)
	}
	workers = append(workers, b)
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		return fail(err)
	}
	defer adm.Close()
	if err := pollUntil(ctx, 30*time.Second, func() bool { return stableMembers(ctx, adm, group) == 2 }); err != nil {
		return fail(fmt.Errorf("%w: the second worker never joined: %w", ErrTakeover, err))
	}
	rt, err := router.New(ctx, router.Config{Brokers: env.Brokers, Topic: topic})
	if err != nil {
		return fail(err)
	}
	defer rt.Close()
	p := cluster.NewProducer(rt, 6, 1)

	var takeover time.Duration
	r, err := Measure(id, name, 1, func() error {
		if err := a.Signal(syscall.SIGSTOP); err != nil {
			return err
		}
		stopped := time.Now()
		defer a.Signal(syscall.SIGCONT) //nolint:errcheck // best effort: StopAll resumes it too
		// The stop reaches a's threads asynchronously: produce only once
		// all of them have stopped, or a may still fetch the command and
		// freeze inside its batch's transaction, holding SQLite's write
		// lock, so that the second worker's claim waits for it (busy)
		// until a resumes.
		if err := pollUntil(ctx, 10*time.Second, a.Stopped); err != nil {
			return fmt.Errorf("%w: the first worker did not stop: %w", ErrTakeover, err)
		}
		if err := p.Send(ctx, 1); err != nil {
			return err
		}
		err := pollUntil(ctx, 10*W6SessionTimeout+30*time.Second, func() bool {
			n, err := store.Count(ctx, "SELECT count(*) FROM ledger_postings")
			return err == nil && n > 0
		})
		takeover = time.Since(stopped)
		if err != nil {
			// What the second worker saw, so that a failure says where the
			// takeover stopped (never joined, claim refused, stalled).
			return fmt.Errorf("%w: no write after the pause: %w (the second worker owns %v, its last error: %s; claims %d, stalls %d %q, fenced %d)",
				ErrTakeover, err, b.Owned(), b.LastErr(), b.Count(consumer.KindClaimed), b.Count(consumer.KindStalled), stallErrors(b), b.FencedCount())
		}
		if !a.Stopped() {
			return fmt.Errorf("%w: the first worker was not stopped at takeover", ErrTakeover)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	ps, err := store.Postings(ctx)
	if err != nil {
		return r, err
	}
	if len(ps) != 1 || ps[0].Member != b.Member() {
		return r, fmt.Errorf("%w: want one posting by the second worker (member %q), got %+v", ErrTakeover, b.Member(), ps)
	}
	r.Elapsed = takeover
	r.Extra = fmt.Sprintf("takeover=%s session_timeout=%s heartbeat=200ms", takeover.Round(time.Millisecond), W6SessionTimeout)
	return r, nil
}

// stableMembers returns the member count of group if it is Stable, else 0.
func stableMembers(ctx context.Context, adm *kadm.Client, group string) int {
	gs, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return 0
	}
	g, ok := gs[group]
	if !ok || g.Err != nil || g.State != "Stable" {
		return 0
	}
	return len(g.Members)
}

// stallErrors returns the errors of w's Stalled events, oldest first.
func stallErrors(w *cluster.Worker) []string {
	var errs []string
	for _, r := range w.Records() {
		if r.Kind == consumer.KindStalled {
			errs = append(errs, r.Err)
		}
	}
	return errs
}
