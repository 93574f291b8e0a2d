package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/cli"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/consumer/eventlog"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/kafka"
	"github.com/workrouter/workrouter/sink/redis"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// The harness's worker is the product worker (cli.RunWorker) plus the
// fault hooks of package faults, given through cli.WorkerHooks. It is
// reachable only through an internal entry point: the workrouter-lab
// binary runs it, instead of the CLI, when its environment
// has cluster.EnvHarnessWorker=1, which the demo, the chaos harness and the
// process tests set on the worker processes they start
// (docs/design.md#testing). No command, flag or help text of the CLI
// exposes it, the product `worker` installs no hook and no signal handler
// besides SIGINT and SIGTERM, and the product binary (cmd/workrouter)
// links neither this entry point nor package faults.

// harnessHooks are the fault hooks a harness worker installs.
type harnessHooks struct {
	// chaos arms signal-triggered faults: SIGUSR1 freezes (SIGSTOP) before
	// the next batch, SIGUSR2 cuts the broker connections, SIGHUP stalls
	// them for stall, SIGWINCH interrupts the next sink transaction
	// mid-way.
	chaos bool
	stall time.Duration
	// holdGate, with chaos, arms SIGALRM: the next batch waits before its
	// write until this file exists (the network faults' batch in hand).
	holdGate string
	// dialMap routes the worker's broker connections through the network
	// fault layer's proxies: "real=proxy,…" (host:port each); every
	// address the client dials, seed or advertised, is looked up in it.
	dialMap string
	// sinkDialMap routes the Kafka sink's clients (its producers, its
	// admin client and the ledger's events reader) the same way, through
	// links of their own; empty: through dialMap's. Either way a cut of
	// the broker links that carry them cuts the sink's producer too.
	sinkDialMap string
	// sinkRoutes dials the Kafka sink's clients (built from sinkDialMap
	// before the worker starts; nil without a dial map).
	sinkRoutes *routedDialer
	// freezeAt freezes the process before its Nth batch (0: never);
	// with holdFile, the batch waits there for that file instead (the
	// container's freeze is `docker pause`, from outside).
	freezeAt int64
	holdFile string
	// hangBeforeCommit and hangAfterCommit block the Nth batch inside its
	// last effect, or after the sink committed it, until the process is
	// killed (0: never).
	hangBeforeCommit, hangAfterCommit int64
	// gateAt blocks the Nth batch inside its last effect, reporting the
	// database session's backend ID, until gateFile exists.
	gateAt   int64
	gateFile string
	// panicType, if set, adds a handler for that command type that
	// panics (a handler bug the worker must survive).
	panicType string
}

// workerHooks are h's hooks for every sink of the product worker, and
// the settings only the harness changes (lag interval, SQLite's busy
// timeout, set by the flags).
func (h *harnessHooks) workerHooks(settings cli.WorkerHooks) *cli.WorkerHooks {
	settings.SQLite = sinkHook[*sqlite.Tx](h)
	settings.Postgres = sinkHook[pgx.Tx](h)
	settings.Redis = sinkHook[*redis.Tx](h)
	settings.Kafka = sinkHook[*kafka.Tx](h)
	return &settings
}

// sinkHook is h's hook for a sink whose transactions are Tx: the panicking
// handler of --panic-type, then the fault hooks (installHooks).
func sinkHook[Tx any](h *harnessHooks) cli.SinkHook[Tx] {
	return func(ctx context.Context, s sink.Sink[Tx], handlers map[string]consumer.Handler[Tx], env cli.HookEnv[Tx]) (sink.Sink[Tx], []kgo.Opt, func(), error) {
		if (h.chaos || h.dialMap != "" || h.sinkDialMap != "") && env.TLS {
			return nil, nil, nil, fmt.Errorf("--chaos, --dial-map and --sink-dial-map dial the brokers with a plain TCP dialer: run the fault harness on a plaintext listener")
		}
		if h.panicType != "" {
			handlers[h.panicType] = panickingHandler[Tx](h.panicType)
		}
		return installHooks(ctx, h, s, env.Events, env.BackendPID)
	}
}

// panickingHandler is the handler --panic-type adds: it panics on every
// command, as a buggy handler would.
func panickingHandler[Tx any](typ string) consumer.Handler[Tx] {
	return func(_ context.Context, _ Tx, cmd consumer.Command) error {
		panic(fmt.Sprintf("harness: the %s handler panics (offset %d)", typ, cmd.Offset))
	}
}

// harnessMain runs the harness's worker with args and returns the exit
// code.
func harnessMain(args []string) int {
	if harnessBrokerEntry() {
		return harnessBrokerMain(args)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var f cli.WorkerFlags
	var h harnessHooks
	var settings cli.WorkerHooks
	cmd := &cobra.Command{
		Use:           "harness-worker",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The one variable the harness sets for its workers: the SASL
			// password, which never goes on a command line.
			if err := cli.ApplyEnv(cmd.Flags(), func(name string) (string, bool) {
				if name != cli.EnvName("sasl-password") {
					return "", false
				}
				return os.LookupEnv(name)
			}); err != nil {
				return err
			}
			if err := h.kafkaSinkDialer(&settings); err != nil {
				return err
			}
			// RunWorker refuses to run without --events: the harness
			// follows the worker's events, not its log.
			return cli.RunWorker(cmd, f, h.workerHooks(settings))
		},
	}
	fl := cmd.Flags()
	cli.AddWorkerFlags(fl, &f)
	fl.String("log-level", "info", "log level")
	fl.String("log-format", "text", "log format")
	fl.BoolVar(&h.chaos, "chaos", false, "signal-armed faults (SIGUSR1 freeze, SIGUSR2 cut, SIGHUP stall, SIGWINCH sink interrupt)")
	fl.DurationVar(&h.stall, "chaos-stall", 3*time.Second, "how long SIGHUP stalls the broker connections")
	fl.StringVar(&h.holdGate, "chaos-hold-gate", "", "with --chaos: SIGALRM holds the next batch before its write until this file exists")
	fl.StringVar(&h.dialMap, "dial-map", "", "dial each broker address through another: real=proxy,… (host:port each)")
	fl.StringVar(&h.sinkDialMap, "sink-dial-map", "", "with --sink kafka: dial the sink's clients through other addresses: real=proxy,… (default: --dial-map)")
	fl.Int64Var(&h.freezeAt, "freeze-before-batch", 0, "SIGSTOP this process right before its Nth batch")
	fl.StringVar(&h.holdFile, "freeze-hold-file", "", "with --freeze-before-batch: wait there until this file exists instead of SIGSTOP")
	fl.Int64Var(&h.hangBeforeCommit, "hang-before-commit", 0, "block the Nth batch inside its last effect until killed")
	fl.Int64Var(&h.hangAfterCommit, "hang-after-commit", 0, "block the Nth batch after the sink committed it until killed")
	fl.Int64Var(&h.gateAt, "gate-batch", 0, "block the Nth batch inside its last effect until --gate-file exists")
	fl.StringVar(&h.gateFile, "gate-file", "", "the file --gate-batch waits for")
	fl.DurationVar(&settings.SQLiteBusyTimeout, "sqlite-busy-timeout", 0, "the SQLite sink's busy timeout (default: the sink's)")
	fl.StringVar(&h.panicType, "panic-type", "", "add a handler for this command type that panics")
	fl.DurationVar(&settings.LagInterval, "lag-interval", 0, "how often the worker reports its lag (default: the consumer's)")
	cmd.SetArgs(args)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "workrouter harness worker: %v\n", err)
		return 1
	}
	return 0
}

// installHooks wraps s with h's hooks, which report on events; it returns
// the wrapped sink, the client options (the cuttable dialer) and a
// function that stops the hooks' goroutines.
func installHooks[Tx any](ctx context.Context, h *harnessHooks, s sink.Sink[Tx], events *eventlog.Writer,
	backendPID func(context.Context, Tx) (int, error)) (sink.Sink[Tx], []kgo.Opt, func(), error) {
	if events == nil {
		return nil, nil, nil, fmt.Errorf("fault hooks need --events")
	}
	emit := func(kind string, tok epochs.Token, offsets []int64, fields map[string]string) {
		r := eventlog.Record{Kind: kind, Group: tok.Group, Topic: tok.Topic, Partition: tok.Partition, Epoch: tok.Epoch,
			Member: tok.Member, Fields: fields}
		if tok.IsZero() {
			r.Partition = -1
		}
		if len(offsets) > 0 {
			r.FirstOffset, r.NextOffset, r.Records = offsets[0], offsets[len(offsets)-1]+1, len(offsets)
		}
		_ = events.Emit(r)
	}
	var opts []kgo.Opt
	var stops []func()
	routes, err := parseDialMap(h.dialMap)
	if err != nil {
		return nil, nil, nil, err
	}
	dial := (&net.Dialer{}).DialContext
	if h.chaos {
		cut := faults.NewInterrupter(s, func(tok epochs.Token, err error) {
			emit(faults.KindSinkCut, tok, nil, map[string]string{"err": fmt.Sprint(err)})
		})
		freeze := faults.NewFreezer[Tx](cut, func(tok epochs.Token, offsets []int64) {
			emit(faults.KindFreezing, tok, offsets, nil)
		})
		dialer := faults.NewDialer()
		dial = dialer.DialContext
		s = freeze
		var hold *faults.Freezer[Tx]
		if h.holdGate != "" {
			hold = faults.NewHolder[Tx](freeze, h.holdGate, func(tok epochs.Token, offsets []int64) {
				emit(faults.KindHolding, tok, offsets, nil)
			})
			s = hold
		}
		sigs := make(chan os.Signal, 8)
		signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGWINCH, syscall.SIGALRM)
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-sctx.Done():
					return
				case sig := <-sigs:
					switch sig {
					case syscall.SIGUSR1:
						freeze.Arm()
						emit(faults.KindFreezeArmed, epochs.Token{}, nil, nil)
					case syscall.SIGUSR2:
						emit(faults.KindBrokerCut, epochs.Token{}, nil, map[string]string{"conns": strconv.Itoa(dialer.Cut())})
					case syscall.SIGHUP:
						n := dialer.Stall(h.stall)
						emit(faults.KindBrokerStall, epochs.Token{}, nil, map[string]string{"conns": strconv.Itoa(n), "for": h.stall.String()})
					case syscall.SIGWINCH:
						cut.Arm()
						emit(faults.KindSinkArmed, epochs.Token{}, nil, nil)
					case syscall.SIGALRM:
						if hold != nil {
							hold.Arm()
						}
					}
				}
			}
		})
		stops = append(stops, func() {
			cancel()
			wg.Wait()
			signal.Stop(sigs)
			dialer.Close()
		})
	}
	if len(routes) > 0 {
		rd := newRoutedDialer(routes, dial)
		rd.report(func(addr string) {
			emit(faults.KindDialUnmapped, epochs.Token{}, nil, map[string]string{"addr": addr, "client": "consumer"})
		})
		dial = rd.DialContext
	}
	if h.sinkRoutes != nil {
		h.sinkRoutes.report(func(addr string) {
			emit(faults.KindDialUnmapped, epochs.Token{}, nil, map[string]string{"addr": addr, "client": "kafka-sink"})
		})
	}
	if h.chaos || len(routes) > 0 {
		opts = append(opts, kgo.Dialer(dial))
	}
	if h.freezeAt > 0 {
		before := func(tok epochs.Token, offsets []int64) { emit(faults.KindFreezing, tok, offsets, nil) }
		if h.holdFile != "" {
			s = faults.HoldBeforeBatch(s, h.freezeAt, h.holdFile, before)
		} else {
			s = faults.FreezeBeforeBatch(s, h.freezeAt, before)
		}
	}
	hang := func(n int64, point faults.HangPoint, release <-chan struct{}, name string) {
		s = faults.NewHang(s, n, point, release, func(ctx context.Context, tok epochs.Token, offsets []int64, tx Tx) {
			fields := map[string]string{"hook": name, "point": point.String()}
			if point == faults.BeforeCommit && backendPID != nil {
				if pid, err := backendPID(ctx, tx); err == nil {
					fields["pid"] = strconv.Itoa(pid)
				}
			}
			emit(faults.KindHang, tok, offsets, fields)
		})
	}
	if h.hangBeforeCommit > 0 {
		hang(h.hangBeforeCommit, faults.BeforeCommit, nil, "hang-before-commit")
	}
	if h.hangAfterCommit > 0 {
		hang(h.hangAfterCommit, faults.AfterCommit, nil, "hang-after-commit")
	}
	if h.gateAt > 0 {
		if h.gateFile == "" {
			return nil, nil, nil, fmt.Errorf("--gate-batch needs --gate-file")
		}
		open := make(chan struct{})
		gctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(open)
			for gctx.Err() == nil {
				if _, err := os.Stat(h.gateFile); err == nil {
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
		stops = append(stops, func() { cancel(); wg.Wait() })
		hang(h.gateAt, faults.BeforeCommit, open, "gate")
	}
	return s, opts, func() {
		for _, stop := range stops {
			stop()
		}
	}, nil
}

// kafkaSinkDialer sets settings.KafkaSinkOpts to a dialer through
// --sink-dial-map's routes (--dial-map's without it), so that the Kafka
// sink's clients reach the brokers through the network fault layer's
// links as the consumer does. Its dials outside the routes are reported
// as the consumer's are, once the worker's events exist (installHooks).
func (h *harnessHooks) kafkaSinkDialer(settings *cli.WorkerHooks) error {
	spec := h.sinkDialMap
	if spec == "" {
		spec = h.dialMap
	}
	routes, err := parseDialMap(spec)
	if err != nil {
		return fmt.Errorf("--sink-dial-map: %w", err)
	}
	if len(routes) == 0 {
		return nil
	}
	h.sinkRoutes = newRoutedDialer(routes, (&net.Dialer{}).DialContext)
	settings.KafkaSinkOpts = []kgo.Opt{kgo.Dialer(h.sinkRoutes.DialContext)}
	return nil
}

// routedDialer dials each address through its route and an address
// without one directly, reporting each such address once: a network
// fault on the links does not reach that connection. Addresses dialled
// before report is called are reported then.
type routedDialer struct {
	routes map[string]string
	base   func(ctx context.Context, network, addr string) (net.Conn, error)

	mu       sync.Mutex
	unmapped map[string]bool
	pending  []string
	emit     func(addr string)
}

func newRoutedDialer(routes map[string]string, base func(ctx context.Context, network, addr string) (net.Conn, error)) *routedDialer {
	return &routedDialer{routes: routes, base: base, unmapped: map[string]bool{}}
}

// DialContext dials addr through its route.
func (d *routedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	to, ok := d.routes[addr]
	if !ok {
		d.mu.Lock()
		first := !d.unmapped[addr]
		d.unmapped[addr] = true
		emit := d.emit
		if first && emit == nil {
			d.pending = append(d.pending, addr)
		}
		d.mu.Unlock()
		if first && emit != nil {
			emit(addr)
		}
		to = addr
	}
	return d.base(ctx, network, to)
}

// report sets where unmapped addresses are reported, and reports those
// dialled so far.
func (d *routedDialer) report(emit func(addr string)) {
	d.mu.Lock()
	pending := d.pending
	d.pending, d.emit = nil, emit
	d.mu.Unlock()
	for _, a := range pending {
		emit(a)
	}
}

// parseDialMap parses --dial-map: "real=proxy,…", host:port each.
func parseDialMap(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		_, _, errFrom := net.SplitHostPort(from)
		_, _, errTo := net.SplitHostPort(to)
		if !ok || errFrom != nil || errTo != nil {
			return nil, fmt.Errorf("--dial-map: %q is not real=proxy with host:port each", pair)
		}
		out[from] = to
	}
	return out, nil
}

// harnessEntry reports whether this process was started as the harness's
// worker or the harness's broker (harnessbroker.go).
func harnessEntry() bool { return os.Getenv(cluster.EnvHarnessWorker) == "1" || harnessBrokerEntry() }
