package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/kafkaconn"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/router/jsonl"
)

// defaultBrokers is the default of every command's --brokers flag.
var defaultBrokers = []string{"127.0.0.1:9092"}

// Bounds of what produce is asked to generate or send. A value beyond them
// is a typo, refused with one line before anything is allocated or sent.
const (
	// maxPayload is the largest payload of one command (--size, --payload):
	// a command is one Kafka record, and a record must fit in one record
	// batch of at most 1,000,012 bytes (franz-go's default
	// ProducerBatchMaxBytes, just below Kafka's default message.max.bytes
	// of 1,048,588), with room left for its key, headers and framing.
	maxPayload = 990_000
	// maxCount is the most commands one --count run generates.
	maxCount = 1_000_000_000
	// maxKeys is the most distinct keys of generated load (--keys); they
	// are held in memory.
	maxKeys = 1_000_000
)

// produceFlags holds the values of `workrouter produce`'s flags.
type produceFlags struct {
	brokers []string
	topic   string
	timeout time.Duration

	key     string
	typ     string
	id      string
	payload string
	headers []string

	file string

	count int64
	keys  int
	size  int

	partitioner string
	compression string
	conn        ConnFlags
}

func newProduceCmd() *cobra.Command {
	var f produceFlags
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Send keyed commands to a topic: one from flags, a JSON-lines file, or generated load",
		Long: `produce sends keyed commands through the workrouter router: each key maps to
one partition (Kafka's murmur2 partitioner), so all commands of a key are
applied in order by the single worker that owns that partition. It refuses to
send if the topic's partition count changes while it runs.

It takes exactly one source of commands:

  --key K --type T [--id ID] [--payload P] [--header k=v ...]
      one command; prints "partition=P offset=O".

  --file F  (F = - reads stdin)
      one JSON object per line:
        {"key":"acct-42","type":"deposit","id":"dep-7","payload":{"cents":100},"headers":{"trace":"abc"}}
      "payload" is any JSON value; a JSON string is sent as its text, anything
      else as its JSON encoding. "id" is optional. Empty lines are skipped.
      Lines are sent pipelined (up to 20,000 awaiting their acknowledgement)
      and each key's commands are written in file order (kgo's idempotent
      producer keeps a partition's order across requests in flight). A
      progress line is drawn on stderr, and a closing line says "produced N
      commands in Xs (Y/s)".
      The first line that cannot be parsed, or whose command is refused or
      fails to send, stops the run: no later line is sent (lines already in
      flight complete), so no key's sequence is applied with a hole in it.
      The command exits 1 naming the first failed line, how many failed, how
      many were acknowledged and the last line sent; the other failed lines
      are listed on stderr, each with its number and, if it was sent, its
      command ID (it may have been written: send it again with that "id").
      No line is sent twice.

Every command carries a command ID (header workrouter-id): --id, or a
line's "id", or else one the router generates. Workers that deduplicate
apply an ID once, so sending a file again after a failed run, with an "id"
on every line, applies each command once; without ids, a line sent twice is
applied twice. A failed single send says its ID: retry with --id ID.

  --count N [--keys K] [--size B] [--type T]
      generated load: N commands of type "load" (or --type) over the keys
      key-0 … key-(K-1), round-robin, each with B bytes of payload. A progress
      line is drawn on stderr (periodic lines when stderr is not a terminal)
      and a closing line says "produced N commands in Xs (Y/s)".

Keys are placed with Kafka's murmur2 partitioner (--partitioner murmur2), or
with librdkafka's default, CRC32 (--partitioner crc32), where the topic's other
producers use it; the workers must use the same (workrouter worker
--partitioner).

Unreachable brokers fail after --timeout with one line, and so do refused
credentials and untrusted certificates, naming the cause.
` + ConnHelp,
		Example: `  # One command:
  workrouter produce --topic commands --key acct-42 --type deposit --payload '{"cents":100}'

  # A file of JSON lines, or stdin:
  workrouter produce --topic commands --file commands.jsonl
  printf '{"key":"a","type":"touch"}\n' | workrouter produce --topic commands --file -

  # 100000 commands of 100 bytes over 1000 keys:
  workrouter produce --topic commands --count 100000 --keys 1000 --size 100

  # Through the environment:
  WORKROUTER_BROKERS=10.0.0.1:9092,10.0.0.2:9092 WORKROUTER_TOPIC=commands workrouter produce --count 1000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runProduce(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.brokers, "brokers", defaultBrokers, "seed brokers, comma-separated")
	fl.StringVar(&f.topic, "topic", "", "topic to send to; it must exist (required)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the brokers, and for each command's acknowledgement")
	fl.StringVar(&f.key, "key", "", "key of the single command to send")
	fl.StringVar(&f.typ, "type", "", `command type (required with --key; default "load" with --count)`)
	fl.StringVar(&f.id, "id", "", fmt.Sprintf("command ID (idempotency key) of the single command, at most %d bytes; default: one is generated", envelope.MaxIDLen))
	fl.StringVar(&f.payload, "payload", "", "payload of the single command (sent as is)")
	fl.StringArrayVar(&f.headers, "header", nil, "header k=v of the single command; repeatable")
	fl.StringVar(&f.file, "file", "", `file of JSON-lines commands to send; "-" reads stdin`)
	fl.Int64Var(&f.count, "count", 0, fmt.Sprintf("generate and send this many load commands (at most %d)", maxCount))
	fl.IntVar(&f.keys, "keys", 100, fmt.Sprintf("distinct keys of the generated load (at most %d)", maxKeys))
	fl.IntVar(&f.size, "size", 100, fmt.Sprintf("payload bytes of each generated command (at most %d)", maxPayload))
	fl.StringVar(&f.partitioner, "partitioner", "murmur2", "how keys map to partitions: murmur2 (Kafka's default) or crc32 (librdkafka's default)")
	fl.StringVar(&f.compression, "compression", "none", "codec of the record batches: none (every client reads it), gzip, snappy, lz4 or zstd (see docs/interop.md for what each consumer needs)")
	AddConnFlags(fl, &f.conn)
	return cmd
}

// produceMode is the source of commands a produce run was given.
type produceMode int

const (
	modeSingle produceMode = iota
	modeFile
	modeLoad
)

// checkProduceFlags validates the flag combination and returns the mode.
func checkProduceFlags(cmd *cobra.Command, f *produceFlags) (produceMode, error) {
	set := func(name string) bool { return cmd.Flags().Changed(name) }
	if f.topic == "" {
		return 0, errors.New("--topic is required")
	}
	if f.timeout <= 0 {
		return 0, fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	single := set("key") || set("payload") || set("header") || set("id")
	var sources []string
	if single {
		sources = append(sources, "--key/--id/--payload/--header")
	}
	if set("file") {
		sources = append(sources, "--file")
	}
	if set("count") {
		sources = append(sources, "--count")
	}
	switch {
	case len(sources) == 0:
		return 0, errors.New("nothing to produce: give --key and --type, --file FILE, or --count N")
	case len(sources) > 1:
		return 0, fmt.Errorf("give only one source of commands, not %s", strings.Join(sources, " and "))
	}
	if !set("count") && (set("keys") || set("size")) {
		return 0, errors.New("--keys and --size only apply to generated load (--count)")
	}
	switch {
	case single:
		if f.key == "" {
			return 0, errors.New("--key is required for a single command (and must not be empty)")
		}
		if f.typ == "" {
			return 0, errors.New("--type is required with --key")
		}
		if len(f.payload) > maxPayload {
			return 0, fmt.Errorf("--payload is %d bytes; one command carries at most %d (a Kafka record batch's default limit, less room for the key and headers)", len(f.payload), maxPayload)
		}
		return modeSingle, nil
	case set("file"):
		if f.file == "" {
			return 0, errors.New(`--file is empty: give a path, or "-" for stdin`)
		}
		if set("type") {
			return 0, errors.New("--type does not apply to --file: each line carries its own type")
		}
		return modeFile, nil
	default:
		switch {
		case f.count < 1:
			return 0, fmt.Errorf("--count must be at least 1, got %d", f.count)
		case f.count > maxCount:
			return 0, fmt.Errorf("--count must be at most %d, got %d", maxCount, f.count)
		case f.keys < 1:
			return 0, fmt.Errorf("--keys must be at least 1, got %d", f.keys)
		case f.keys > maxKeys:
			return 0, fmt.Errorf("--keys must be at most %d, got %d", maxKeys, f.keys)
		case f.size < 0:
			return 0, fmt.Errorf("--size must not be negative, got %d", f.size)
		case f.size > maxPayload:
			return 0, fmt.Errorf("--size must be at most %d bytes (one command is one Kafka record, and a record batch holds at most 1,000,012 bytes by default), got %d", maxPayload, f.size)
		}
		if f.typ == "" {
			f.typ = "load"
		}
		return modeLoad, nil
	}
}

func runProduce(cmd *cobra.Command, f produceFlags) error {
	mode, err := checkProduceFlags(cmd, &f)
	if err != nil {
		return err
	}
	var single router.Command
	if mode == modeSingle {
		if single, err = singleCommand(f); err != nil {
			return err
		}
	}
	var in io.Reader
	if mode == modeFile {
		if f.file == "-" {
			in = cmd.InOrStdin()
		} else {
			file, err := os.Open(f.file)
			if err != nil {
				return fmt.Errorf("--file: %w", err)
			}
			defer file.Close()
			in = file
		}
	}
	logger, err := quietLogger(cmd)
	if err != nil {
		return err
	}
	partitioner, err := envelope.ParsePartitioner(f.partitioner)
	if err != nil {
		return fmt.Errorf("--partitioner: %w", err)
	}
	compression, err := envelope.ParseCompression(f.compression)
	if err != nil {
		return fmt.Errorf("--compression %q: want none, gzip, snappy, lz4 or zstd", f.compression)
	}
	c, err := ResolveConn(cmd, f.conn, f.brokers)
	if err != nil {
		return err
	}
	f.brokers = c.brokers

	ctx := cmd.Context()
	rt, err := openRouter(ctx, f, c, partitioner, compression, logger)
	if err != nil {
		return err
	}
	closeRouter := func() error {
		if err := rt.Close(); err != nil {
			return fmt.Errorf("closing the producer: %w", err)
		}
		return nil
	}

	out := cmd.OutOrStdout()
	switch mode {
	case modeSingle:
		gctx, stop := c.guard(ctx)
		sctx, cancel := context.WithTimeout(gctx, f.timeout)
		res, err := rt.Send(sctx, single)
		cancel()
		stop()
		if err != nil {
			retry := ""
			if res.ID != "" {
				// It may have been written: the same ID makes a retry the same command.
				retry = fmt.Sprintf(" (command ID %s: it may have been written; retry with --id %s)", res.ID, res.ID)
			}
			return errors.Join(fmt.Errorf("send failed: %w%s", c.explain(err), retry), closeRouter())
		}
		if err := closeRouter(); err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "partition=%d offset=%d\n", res.Partition, res.Offset)
		return err
	case modeFile:
		return produceFile(ctx, cmd, rt, in, f, closeRouter)
	default:
		return produceLoad(ctx, cmd, rt, f, closeRouter)
	}
}

// openRouter connects the router, turning its setup errors into one clear
// line.
func openRouter(ctx context.Context, f produceFlags, c Conn, partitioner envelope.Partitioner, compression envelope.Compression, logger *slog.Logger) (*router.Router, error) {
	gctx, stop := c.guard(ctx)
	defer stop()
	nctx, cancel := context.WithTimeout(gctx, f.timeout)
	defer cancel()
	rt, err := router.New(nctx, router.Config{
		Brokers:      f.brokers,
		Topic:        f.topic,
		CloseTimeout: f.timeout,
		Logger:       logger,
		Partitioner:  partitioner,
		Compression:  compression,
		ClientOpts: append([]kgo.Opt{
			kgo.RecordDeliveryTimeout(f.timeout),
			// Short enough that a connection that fails (a TLS handshake
			// nobody answers) is seen, and explained, before --timeout.
			kgo.DialTimeout(min(f.timeout/2, 10*time.Second)),
		}, c.opts...),
	})
	if err != nil {
		return nil, brokerError(ctx, c.explain(err), f.brokers, f.topic, f.timeout)
	}
	return rt, nil
}

// brokerError rewords the errors of connecting to the brokers.
func brokerError(ctx context.Context, err error, brokers []string, topic string, timeout time.Duration) error {
	var connErr *kafkaconn.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted while connecting to %s: %w", strings.Join(brokers, ","), ctx.Err())
	case errors.As(err, &connErr):
		return fmt.Errorf("cannot connect to the brokers %s: %w", strings.Join(brokers, ","), err)
	case errors.Is(err, router.ErrTopicNotFound):
		return fmt.Errorf("topic %q does not exist on %s (create it first: kafka-topics.sh --create --topic %s, or workrouter-lab broker --topic %s for the embedded broker)",
			topic, strings.Join(brokers, ","), topic, topic)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("cannot reach the brokers %s within %s (--timeout); is a broker running there?",
			strings.Join(brokers, ","), timeout)
	case errors.Is(err, router.ErrMetadata):
		return fmt.Errorf("cannot reach the brokers %s: %w", strings.Join(brokers, ","), err)
	}
	return err
}

// singleCommand builds the command given by --key/--type/--payload/--header.
func singleCommand(f produceFlags) (router.Command, error) {
	c := router.Command{Key: []byte(f.key), Type: f.typ, ID: f.id}
	if f.payload != "" {
		c.Payload = []byte(f.payload)
	}
	for _, h := range f.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok || k == "" {
			return router.Command{}, fmt.Errorf("--header %q: want KEY=VALUE", h)
		}
		c.Headers = append(c.Headers, envelope.Header{Key: k, Value: []byte(v)})
	}
	if err := c.Validate(); err != nil {
		return router.Command{}, err
	}
	return c, nil
}

// produceFile sends the JSON-lines commands of in through jsonl (the
// rule is there), with a progress line, and renders the report: every
// listed failure on stderr, the closing line on stdout.
func produceFile(ctx context.Context, cmd *cobra.Command, rt *router.Router, in io.Reader, f produceFlags, closeRouter func() error) error {
	p, err := jsonl.New(rt, jsonl.Config{FlushTimeout: f.timeout + 5*time.Second})
	if err != nil {
		return errors.Join(err, closeRouter())
	}
	prog := startProgress(cmd.ErrOrStderr(), 0, p.Acknowledged)
	rep, err := p.Run(ctx, in)
	prog.stop()
	cerr := closeRouter()
	if err == nil {
		if cerr != nil {
			return cerr
		}
		return printThroughput(cmd.OutOrStdout(), rep.Acked, rep.Elapsed)
	}
	// The first failure is the error's line; the others, and any command
	// written after an earlier one of its key failed, go to stderr first.
	errOut := cmd.ErrOrStderr()
	for i := 1; i < len(rep.Failures); i++ {
		fmt.Fprintf(errOut, "produce: %v\n", &rep.Failures[i])
	}
	if more := rep.Failed - int64(len(rep.Failures)); more > 0 {
		fmt.Fprintf(errOut, "produce: … and %d more failed %s\n", more, plural(int(more), "line", "lines"))
	}
	for _, w := range rep.OutOfOrderWrites {
		fmt.Fprintf(errOut, "produce: line %d (key %q) was written at %d@%d after line %d of the same key failed\n",
			w.Line, w.Key, w.Partition, w.Offset, w.FailedLine)
	}
	sent := "no line was sent"
	if rep.LastSent > 0 {
		sent = fmt.Sprintf("no line after line %d was sent", rep.LastSent)
	}
	summary := fmt.Sprintf("%d %s failed, %d %s acknowledged; %s", rep.Failed, plural(int(rep.Failed), "line", "lines"),
		rep.Acked, plural(int(rep.Acked), "command", "commands"), sent)
	switch {
	case errors.Is(err, jsonl.ErrOutOfOrder):
		err = fmt.Errorf("%w (%s)", err, summary)
	case len(rep.Failures) > 0:
		err = fmt.Errorf("%v (%s)", &rep.Failures[0], summary)
		if rep.Interrupted {
			err = fmt.Errorf("interrupted: %w", err)
		}
	default:
		err = fmt.Errorf("%w (%s)", err, summary)
	}
	return errors.Join(err, cerr)
}

// produceLoad sends --count generated commands asynchronously, with a
// progress line, and prints the throughput line.
func produceLoad(ctx context.Context, cmd *cobra.Command, rt *router.Router, f produceFlags, closeRouter func() error) error {
	keys := make([][]byte, f.keys)
	for i := range keys {
		keys[i] = []byte("key-" + strconv.Itoa(i))
	}
	// One read-only pool of printable random bytes; payload i is a window
	// into it, so no command's bytes change while it is being sent.
	const spread = 4096
	pool := make([]byte, f.size+spread)
	rng := rand.New(rand.NewChaCha8([32]byte{'w', 'o', 'r', 'k', 'r', 'o', 'u', 't', 'e', 'r'}))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := range pool {
		pool[i] = alphabet[rng.IntN(len(alphabet))]
	}

	var (
		acked    atomic.Int64
		failed   atomic.Bool
		errOnce  sync.Once
		firstErr error
	)
	done := func(_ router.Result, err error) {
		if err != nil {
			errOnce.Do(func() { firstErr = err })
			failed.Store(true)
			return
		}
		acked.Add(1)
	}

	prog := startProgress(cmd.ErrOrStderr(), f.count, acked.Load)
	start := time.Now()
	var issued int64
	for issued < f.count && !failed.Load() && ctx.Err() == nil {
		off := int(issued % spread)
		rt.SendAsync(ctx, router.Command{
			Key:     keys[issued%int64(len(keys))],
			Type:    f.typ,
			Payload: pool[off : off+f.size],
		}, done)
		issued++
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout+5*time.Second)
	ferr := rt.Flush(fctx)
	cancel()
	elapsed := time.Since(start)
	prog.stop()
	cerr := closeRouter()

	n := acked.Load()
	switch {
	case failed.Load():
		return errors.Join(fmt.Errorf("send failed after %d of %d commands were acknowledged (stopped sending at the first failure): %w", n, f.count, firstErr), cerr)
	case ctx.Err() != nil:
		return errors.Join(fmt.Errorf("interrupted after %d of %d commands were acknowledged: %w", n, f.count, ctx.Err()), cerr)
	case ferr != nil:
		return errors.Join(fmt.Errorf("%d of %d commands acknowledged: %w", n, f.count, ferr), cerr)
	case cerr != nil:
		return cerr
	}
	return printThroughput(cmd.OutOrStdout(), n, elapsed)
}

// printThroughput prints the closing line of a multi-command run.
func printThroughput(w io.Writer, n int64, d time.Duration) error {
	rate := 0.0
	if s := d.Seconds(); s > 0 {
		rate = float64(n) / s
	}
	_, err := fmt.Fprintf(w, "produced %s in %.2fs (%.0f/s)\n", count(int(n), "command"), d.Seconds(), rate)
	return err
}

// progress draws the progress of a load run on w: one line redrawn in place
// when w is a terminal, a plain line every few seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	total int64
	count func() int64
	start time.Time
	quit  chan struct{}
	done  chan struct{}
}

func startProgress(w io.Writer, total int64, count func() int64) *progress {
	p := &progress{w: w, tty: isTerminal(w), total: total, count: count, start: time.Now(),
		quit: make(chan struct{}), done: make(chan struct{})}
	every := 2 * time.Second
	if p.tty {
		every = 100 * time.Millisecond
	}
	go func() {
		defer close(p.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

// stop stops the ticker; on a terminal it draws the final state and ends
// the line.
func (p *progress) stop() {
	close(p.quit)
	<-p.done
	if p.tty {
		p.draw()
		fmt.Fprintln(p.w)
	}
}

func (p *progress) draw() {
	n := p.count()
	rate := float64(n) / max(time.Since(p.start).Seconds(), 1e-9)
	if p.total <= 0 { // a file or stdin: the total is not known in advance
		if !p.tty {
			fmt.Fprintf(p.w, "produce: %s acknowledged (%.0f/s)\n", count(int(n), "command"), rate)
			return
		}
		fmt.Fprintf(p.w, "\r%s acknowledged, %.0f/s\x1b[K", count(int(n), "command"), rate)
		return
	}
	frac := float64(n) / float64(p.total)
	if !p.tty {
		fmt.Fprintf(p.w, "produce: %d/%d commands acknowledged (%.0f%%, %.0f/s)\n", n, p.total, 100*frac, rate)
		return
	}
	const width = 30
	filled := min(int(frac*width), width)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	fmt.Fprintf(p.w, "\r[%s] %3.0f%% %d/%d %.0f/s\x1b[K", bar, 100*frac, n, p.total, rate)
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// CleanBrokers trims the --brokers values, splits any left with commas,
// drops empty ones and checks each is host:port.
func CleanBrokers(raw []string) ([]string, error) {
	var out []string
	for _, r := range raw {
		for _, b := range strings.Split(r, ",") {
			if b = strings.TrimSpace(b); b == "" {
				continue
			}
			i := strings.LastIndexByte(b, ':')
			if i <= 0 || i == len(b)-1 {
				return nil, fmt.Errorf("--brokers: %q is not host:port", b)
			}
			if _, err := strconv.ParseUint(b[i+1:], 10, 16); err != nil {
				return nil, fmt.Errorf("--brokers: %q: bad port %q", b, b[i+1:])
			}
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--brokers is empty: give host:port[,host:port…]")
	}
	return out, nil
}

// quietLogger is the command's logger (see NewLogger), but at info level
// it keeps to warnings: the clients' info logs are noise in a CLI run.
func quietLogger(cmd *cobra.Command) (*slog.Logger, error) {
	level, _, err := logSettings(cmd)
	if err != nil {
		return nil, err
	}
	if level == slog.LevelInfo {
		level = slog.LevelWarn
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})), nil
}
