// Package demo runs workrouter's in-process demonstration: an embedded
// broker, a ledger of accounts on the memory sink, several workers, and one
// worker frozen past its session timeout whose late write the sink rejects.
//
// The freeze is simulated in-process: the victim's handler stops (ignoring
// its context, as a process under SIGSTOP would) and the broker swallows its
// heartbeats, so the coordinator evicts it and hands its partitions to the
// others. When it is released it tries to land the batch it was applying;
// the fence rejects it. The summary is computed from the sink's own records.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/internal/broker"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/memory"
)

// Config configures Run. Zero values take the documented defaults.
type Config struct {
	Commands   int   // ledger commands to produce; default 3000
	Accounts   int   // distinct account keys; default 200
	Partitions int32 // topic partitions; default 6
	Workers    int   // worker group members; default 3 (at least 2)
	Seed       uint64
	// Out receives the human-readable timeline as it happens; nil discards.
	Out    io.Writer
	Logger *slog.Logger
}

// Summary is the outcome of a demo run, computed from the sink's records.
type Summary struct {
	Produced        int      `json:"produced"`
	Applied         int      `json:"applied"`
	Duplicates      int      `json:"duplicates"`
	Lost            int      `json:"lost"`
	OrderViolations int      `json:"order_violations"`
	StaleRejected   int      `json:"stale_rejected"`
	HistoryErrors   []string `json:"history_errors,omitempty"`
	Timeline        []string `json:"timeline"`
}

// OK reports whether every invariant held and the fault really happened.
func (s Summary) OK() bool {
	return s.Applied == s.Produced && s.Duplicates == 0 && s.Lost == 0 && s.OrderViolations == 0 &&
		s.StaleRejected >= 1 && len(s.HistoryErrors) == 0
}

// Line is the summary's final line.
func (s Summary) Line() string {
	return fmt.Sprintf("demo: produced=%d applied=%d duplicates=%d lost=%d order_violations=%d stale_rejected=%d",
		s.Produced, s.Applied, s.Duplicates, s.Lost, s.OrderViolations, s.StaleRejected)
}

// ErrInvariant is matched by the error Run returns when the run finished but
// an invariant did not hold or the fault did not happen.
var ErrInvariant = errors.New("demo: invariant violated")

const (
	topic = "ledger-commands"
	group = "ledger"
)

type run struct {
	cfg   Config
	start time.Time
	mu    sync.Mutex
	lines []string
	names map[string]string // member ID -> worker name
}

func (r *run) logf(format string, args ...any) {
	line := fmt.Sprintf("%6.2fs  ", time.Since(r.start).Seconds()) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	if r.cfg.Out != nil {
		fmt.Fprintln(r.cfg.Out, line)
	}
}

func (r *run) name(member string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n, ok := r.names[member]; ok {
		return n
	}
	return "member " + member
}

// Run executes the demo. It owns everything it starts and stops it before
// returning. The returned error matches ErrInvariant when the summary is not OK.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	if cfg.Commands == 0 {
		cfg.Commands = 3000
	}
	if cfg.Accounts == 0 {
		cfg.Accounts = 200
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 6
	}
	if cfg.Workers == 0 {
		cfg.Workers = 3
	}
	if cfg.Commands < 0 || cfg.Accounts <= 0 || cfg.Partitions < 0 || cfg.Workers < 2 {
		return Summary{}, fmt.Errorf("demo: need positive commands, accounts, partitions and at least 2 workers")
	}
	r := &run{cfg: cfg, start: time.Now(), names: map[string]string{}}

	b, err := broker.Start(broker.Config{
		Listen:            "127.0.0.1:0",
		Topics:            map[string]int32{topic: cfg.Partitions},
		MinSessionTimeout: 100 * time.Millisecond,
		Logger:            cfg.Logger,
	})
	if err != nil {
		return Summary{}, err
	}
	defer b.Close()
	r.logf("embedded broker on %s, topic %s with %d partitions, memory sink", b.Addr(), topic, cfg.Partitions)

	s := memory.New()
	var stale atomic.Int64

	// The victim's freeze: its handler blocks, its heartbeats vanish.
	var frozen atomic.Bool
	var victimMember atomic.Value
	victimMember.Store("")
	thaw := make(chan struct{})
	entered := make(chan struct{})
	var enterOnce sync.Once
	var swallowed atomic.Int64
	c := b.Cluster()
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && frozen.Load() && hb.MemberID == victimMember.Load().(string) {
			// The frozen process's heartbeat does not reach the
			// coordinator until the process resumes; then it is
			// answered as the coordinator sees fit (the member is gone).
			swallowed.Add(1)
			c.SleepControl(func() { <-thaw })
		}
		return nil, nil, false
	})

	ledger := func(victim bool) consumer.Handler[*memory.Tx] {
		return func(ctx context.Context, tx *memory.Tx, cmd consumer.Command) error {
			if victim && frozen.Load() {
				enterOnce.Do(func() { close(entered) })
				<-thaw // frozen: ignores ctx, as a stopped process would
			}
			return post(tx, cmd)
		}
	}

	workers := make([]*consumer.Worker[*memory.Tx], cfg.Workers)
	defer func() {
		for _, w := range workers {
			if w != nil {
				w.Close()
			}
		}
	}()
	for i := range workers {
		name := "w" + strconv.Itoa(i+1)
		victim := i == 0
		w, err := consumer.New(ctx, consumer.Config[*memory.Tx]{
			Brokers:           []string{b.Addr()},
			Group:             group,
			Topic:             topic,
			Sink:              s,
			Handlers:          map[string]consumer.Handler[*memory.Tx]{"deposit": ledger(victim), "withdraw": ledger(victim)},
			SessionTimeout:    time.Second,
			HeartbeatInterval: 100 * time.Millisecond,
			RebalanceTimeout:  5 * time.Second,
			RevokeTimeout:     time.Minute,
			MaxBatch:          50,
			ClientID:          name,
			Logger:            cfg.Logger,
			OnFenced: func(err error) {
				var fe *sink.FencedError
				if errors.As(err, &fe) {
					stale.Add(1)
					r.logf("REJECTED late %s by %s: offered epoch %d on partition %d, sink holder is %s at epoch %d",
						fe.Op, name, fe.Offered.Epoch, fe.Offered.Partition, r.name(fe.Stored.Member), fe.Stored.Epoch)
				}
			},
		})
		if err != nil {
			return Summary{}, err
		}
		workers[i] = w
	}
	// Wait for every partition to be claimed, and learn member names.
	if err := waitUntil(ctx, 30*time.Second, func() bool {
		n := 0
		for i, w := range workers {
			m, _ := w.Member()
			r.mu.Lock()
			r.names[m] = "w" + strconv.Itoa(i+1)
			r.mu.Unlock()
			n += len(w.Owned())
		}
		if n != int(cfg.Partitions) {
			return false
		}
		for _, w := range workers {
			if len(w.Owned()) == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		return Summary{}, fmt.Errorf("demo: workers did not take every partition: %w", err)
	}
	for i, w := range workers {
		r.logf("w%d owns %s", i+1, describe(w.Owned()))
	}
	victim := workers[0]
	vm, _ := victim.Member()
	victimMember.Store(vm)
	victimParts := victim.Owned()

	// Produce the ledger commands through the router.
	rt, err := router.New(ctx, router.Config{Brokers: []string{b.Addr()}, Topic: topic, Logger: cfg.Logger})
	if err != nil {
		return Summary{}, err
	}
	defer rt.Close()
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed+1))
	produced := make(map[string]int, cfg.Accounts) // account -> commands sent
	var sendErr atomic.Value
	half := cfg.Commands / 2
	send := func(from, to int) error {
		for i := from; i < to; i++ {
			acct := "acct-" + strconv.Itoa(rng.IntN(cfg.Accounts))
			typ, amount := "deposit", 1+rng.IntN(100)
			if rng.IntN(3) == 0 {
				typ = "withdraw"
			}
			seq := produced[acct]
			produced[acct]++
			rt.SendAsync(ctx, router.Command{Key: []byte(acct), Type: typ,
				Payload: []byte(strconv.Itoa(seq) + ":" + strconv.Itoa(amount))},
				func(_ router.Result, err error) {
					if err != nil {
						sendErr.CompareAndSwap(nil, err)
					}
				})
		}
		if err := rt.Flush(ctx); err != nil {
			return err
		}
		if e, _ := sendErr.Load().(error); e != nil {
			return e
		}
		return nil
	}
	if err := send(0, half); err != nil {
		return Summary{}, fmt.Errorf("demo: produce: %w", err)
	}
	r.logf("produced %d commands over %d accounts", half, cfg.Accounts)

	// Freeze the victim mid-batch.
	frozen.Store(true)
	if err := send(half, cfg.Commands); err != nil {
		return Summary{}, fmt.Errorf("demo: produce: %w", err)
	}
	r.logf("produced %d more commands", cfg.Commands-half)
	select {
	case <-entered:
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	case <-time.After(30 * time.Second):
		return Summary{}, fmt.Errorf("demo: the frozen worker never reached a batch")
	}
	r.logf("PAUSE w1: frozen inside a batch (heartbeats stop) past its 1s session timeout; it owned %s", describe(victimParts))

	// Wait until every partition of the victim is claimed by someone else.
	if err := waitUntil(ctx, 60*time.Second, func() bool {
		taken := 0
		for _, tok := range victimParts {
			if f := fenceOf(s, tok.Scope()); f.Holder.Member != vm && f.Holder.Epoch > tok.Epoch {
				taken++
			}
		}
		return taken == len(victimParts)
	}); err != nil {
		return Summary{}, fmt.Errorf("demo: the frozen worker's partitions were not taken over: %w", err)
	}
	for _, tok := range victimParts {
		f := fenceOf(s, tok.Scope())
		r.logf("partition %d taken over by %s at epoch %d (w1 held it at epoch %d)", tok.Partition, r.name(f.Holder.Member), f.Holder.Epoch, tok.Epoch)
	}
	r.logf("RESUME w1 (%d of its heartbeats were held back while it was frozen)", swallowed.Load())
	close(thaw)
	frozen.Store(false)

	if err := waitUntil(ctx, 60*time.Second, func() bool { return stale.Load() >= 1 }); err != nil {
		return Summary{}, fmt.Errorf("demo: the late write was never attempted: %w", err)
	}
	// Lag to zero: every produced command applied.
	if err := waitUntil(ctx, 90*time.Second, func() bool { return countApplied(s) >= cfg.Commands }); err != nil {
		r.logf("not every command was applied: %d of %d", countApplied(s), cfg.Commands)
	} else {
		r.logf("lag is zero: all %d commands applied", cfg.Commands)
	}
	for i, w := range workers {
		r.logf("w%d finally owns %s", i+1, describe(w.Owned()))
	}

	sum := summarize(s, produced)
	sum.Produced = cfg.Commands
	sum.StaleRejected = int(stale.Load())
	if err := s.Verify(); err != nil {
		var ve *memory.VerifyError
		if errors.As(err, &ve) {
			for _, v := range ve.Violations {
				sum.HistoryErrors = append(sum.HistoryErrors, v.String())
			}
		} else {
			sum.HistoryErrors = append(sum.HistoryErrors, err.Error())
		}
	}
	r.mu.Lock()
	sum.Timeline = slices.Clone(r.lines)
	r.mu.Unlock()
	if !sum.OK() {
		return sum, fmt.Errorf("%w: %s", ErrInvariant, sum.Line())
	}
	return sum, nil
}

// post applies one ledger command: it appends the command's sequence number
// to the account's log and updates the balance; a withdrawal that would
// overdraw is recorded as refused (a business outcome, not an error).
func post(tx *memory.Tx, cmd consumer.Command) error {
	seq, amountStr, ok := strings.Cut(string(cmd.Payload), ":")
	amount, err := strconv.Atoi(amountStr)
	if !ok || err != nil {
		return fmt.Errorf("demo: malformed ledger payload %q", cmd.Payload)
	}
	acct := string(cmd.Key)
	bal := 0
	if v, ok := tx.Get("balance/" + acct); ok {
		bal, _ = strconv.Atoi(string(v))
	}
	outcome := "ok"
	switch cmd.Type {
	case "deposit":
		bal += amount
	case "withdraw":
		if amount > bal {
			outcome = "refused"
		} else {
			bal -= amount
		}
	}
	tx.Put("balance/"+acct, []byte(strconv.Itoa(bal)))
	logKey := "log/" + acct
	cur, _ := tx.Get(logKey)
	next := append(slices.Clip(cur), []byte(seq+"="+outcome+",")...)
	tx.Put(logKey, next)
	return nil
}

// summarize checks L, O and X from the account logs against what was sent.
func summarize(s *memory.Sink, produced map[string]int) Summary {
	var sum Summary
	for acct, n := range produced {
		v, _ := s.Get("log/" + acct)
		seen := map[int]bool{}
		prev := -1
		for _, entry := range strings.Split(strings.TrimSuffix(string(v), ","), ",") {
			if entry == "" {
				continue
			}
			seqStr, _, _ := strings.Cut(entry, "=")
			seq, _ := strconv.Atoi(seqStr)
			sum.Applied++
			if seen[seq] {
				sum.Duplicates++
			}
			seen[seq] = true
			if seq < prev {
				sum.OrderViolations++
			}
			prev = seq
		}
		for i := 0; i < n; i++ {
			if !seen[i] {
				sum.Lost++
			}
		}
	}
	return sum
}

func countApplied(s *memory.Sink) int {
	n := 0
	for _, k := range s.Keys("log/") {
		v, _ := s.Get(k)
		n += strings.Count(string(v), ",")
	}
	return n
}

func fenceOf(s *memory.Sink, scope epochs.Scope) sink.Fence {
	fs, _ := s.Fences(context.Background())
	for _, f := range fs {
		if f.Scope == scope {
			return f
		}
	}
	return sink.Fence{}
}

func describe(toks []epochs.Token) string {
	if len(toks) == 0 {
		return "no partitions"
	}
	parts := make([]string, len(toks))
	for i, t := range toks {
		parts[i] = fmt.Sprintf("p%d@epoch%d", t.Partition, t.Epoch)
	}
	return strings.Join(parts, " ")
}

func waitUntil(ctx context.Context, d time.Duration, cond func() bool) error {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("gave up after %s", d)
		case <-tick.C:
		}
	}
	return nil
}
