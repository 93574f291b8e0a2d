package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
)

// W8Sends is how many sequential Router.Send calls a W9 run times.
const W8Sends = 2000

// KcatBinary is the kcat executable B5 runs (looked up in PATH).
const KcatBinary = "kcat"

// commandFiles writes env's Records commands once per Env, as JSON lines
// for `workrouter produce --file` and as key:payload lines for kcat, and
// returns their paths. Command i has W4's key and type, and W4's payload
// with its first 10 bytes replaced by i in decimal, so that checkOrder
// can tell a key's commands apart. Writing them is not measured.
func commandFiles(env *Env) (jsonl, kcat string, err error) {
	if env.fileJSONL != "" {
		return env.fileJSONL, env.fileKcat, nil
	}
	jsonl = filepath.Join(env.TempDir, "commands.jsonl")
	kcat = filepath.Join(env.TempDir, "commands.kcat")
	jf, err := os.Create(jsonl)
	if err != nil {
		return "", "", err
	}
	defer jf.Close()
	kf, err := os.Create(kcat)
	if err != nil {
		return "", "", err
	}
	defer kf.Close()
	jw, kw := bufio.NewWriterSize(jf, 1<<20), bufio.NewWriterSize(kf, 1<<20)
	keys := Keys(env)
	for i := range env.Records {
		c := Command(env, keys, i) // printable ASCII, no '"', '\\' or ':'
		p := fileSeq(i) + string(c.Payload[min(seqDigits, len(c.Payload)):])
		fmt.Fprintf(jw, `{"key":"%s","type":"%s","payload":"%s"}`+"\n", c.Key, c.Type, p)
		fmt.Fprintf(kw, "%s:%s\n", c.Key, p)
	}
	if err := errors.Join(jw.Flush(), kw.Flush(), jf.Sync(), kf.Sync()); err != nil {
		return "", "", err
	}
	env.fileJSONL, env.fileKcat = jsonl, kcat
	return jsonl, kcat, nil
}

// runProcess runs argv as a whole process around Measure, to a fresh
// topic (deleted afterwards), and checks that the topic then holds
// env.Records records. CPU is this process's (the embedded broker's) plus
// the child's.
func runProcess(ctx context.Context, env *Env, id, name string, argv func(topic string) []string) (Result, error) {
	topic, drop, err := createTopic(ctx, env, "bench-"+strings.ToLower(id), env.Partitions)
	if err != nil {
		return Result{ID: id}, err
	}
	defer drop()
	args := argv(topic)
	var cmd *exec.Cmd
	var out strings.Builder
	r, err := Measure(id, name, env.Records, func() error {
		cmd = exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd.Run()
	})
	if err != nil {
		return r, fmt.Errorf("%w: %s", err, strings.TrimSpace(out.String()))
	}
	if ps := cmd.ProcessState; ps != nil {
		r.CPU += ps.UserTime() + ps.SystemTime()
	}
	if n, err := recordsIn(ctx, env, topic); err != nil || n != int64(env.Records) {
		return r, fmt.Errorf("%s: the topic holds %d records, want %d (%v)", id, n, env.Records, err)
	}
	if err := checkOrder(ctx, env, topic, env.Records); err != nil {
		return r, fmt.Errorf("%s: %w", id, err)
	}
	r.Extra = "per-key order checked by a consumer"
	return r, nil
}

// seqDigits is the length of a file command's sequence number.
const seqDigits = 10

func fileSeq(i int) string { return fmt.Sprintf("%0*d", seqDigits, i) }

// checkOrder consumes topic (want records) and checks, as a worker
// would see them, that each key's commands are there once each, in file
// order (their sequence numbers ascend). Not measured.
func checkOrder(ctx context.Context, env *Env, topic string, want int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	last := map[string]int{}
	var n int
	var bad error
	for n < want && bad == nil {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("consumed %d of %d records: %w", n, want, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { bad = errors.Join(bad, err) })
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if len(r.Value) < seqDigits || bad != nil {
				return
			}
			var seq int
			if _, err := fmt.Sscanf(string(r.Value[:seqDigits]), "%d", &seq); err != nil {
				bad = fmt.Errorf("record %d@%d: %w", r.Partition, r.Offset, err)
				return
			}
			if prev, ok := last[string(r.Key)]; ok && seq <= prev {
				bad = fmt.Errorf("key %s: command %d after %d (at %d@%d): not in file order", r.Key, seq, prev, r.Partition, r.Offset)
			}
			last[string(r.Key)] = seq
		})
	}
	return bad
}

// recordsIn sums topic's end offsets.
func recordsIn(ctx context.Context, env *Env, topic string) (int64, error) {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n, err
}

// B5 is W8's baseline: kcat (librdkafka) producing the same commands (see
// commandFiles) from a file of key:payload lines, each with the workrouter-type header,
// partitioned with murmur2 as the router does, as a whole process
// (connection setup included). Skipped if kcat is not in PATH.
func B5(ctx context.Context, env *Env) (Result, error) {
	const name = "kcat -P -l FILE (key, workrouter-type header, payload), whole process"
	bin, err := exec.LookPath(KcatBinary)
	if err != nil {
		return Result{ID: "B5", Name: name, Skipped: "kcat is not installed (apt-get install kcat); produce_file_vs_kcat needs it"}, nil
	}
	_, file, err := commandFiles(env)
	if err != nil {
		return Result{ID: "B5"}, fmt.Errorf("B5: writing the commands: %w", err)
	}
	return runProcess(ctx, env, "B5", name, func(topic string) []string {
		return []string{bin, "-P", "-b", strings.Join(env.Brokers, ","), "-t", topic, "-K", ":",
			"-H", envelope.TypeHeader + "=" + CommandType, "-X", "partitioner=murmur2_random", "-l", file}
	})
}

// W8 runs `workrouter produce --file` on the same commands as B5, as JSON
// lines, as a whole process (connection setup included): the product's
// produce command, which workrouter-lab has too. It needs that executable
// (env.Worker: workrouter-lab bench sets it) and is skipped without it (go
// test -bench).
func W8(ctx context.Context, env *Env) (Result, error) {
	const name = "workrouter produce --file FILE (JSON lines), whole process"
	if len(env.Worker.Argv) == 0 {
		return Result{ID: "W8", Name: name, Skipped: "needs the workrouter-lab executable (run it as workrouter-lab bench)"}, nil
	}
	file, _, err := commandFiles(env)
	if err != nil {
		return Result{ID: "W8"}, fmt.Errorf("W8: writing the commands: %w", err)
	}
	return runProcess(ctx, env, "W8", name, func(topic string) []string {
		return append(slices.Clone(env.Worker.Argv), "produce", "--brokers", strings.Join(env.Brokers, ","),
			"--topic", topic, "--file", file)
	})
}

// W9 times W8Sends sequential Router.Send calls (each waits for its
// acknowledgement) through a router with the default options, after a few
// unmeasured sends that load the metadata; P50 and P99 are the sends'
// latency percentiles.
func W9(ctx context.Context, env *Env) (Result, error) {
	topic, drop, err := createTopic(ctx, env, "bench-w8", env.Partitions)
	if err != nil {
		return Result{ID: "W9"}, err
	}
	defer drop()
	rt, err := router.New(ctx, router.Config{Brokers: env.Brokers, Topic: topic})
	if err != nil {
		return Result{ID: "W9"}, fmt.Errorf("W9: router: %w", err)
	}
	defer rt.Close()
	keys := Keys(env)
	for i := range 20 {
		if _, err := rt.Send(ctx, Command(env, keys, i)); err != nil {
			return Result{ID: "W9"}, fmt.Errorf("W9: warm-up send: %w", err)
		}
	}
	lat := make([]time.Duration, 0, W8Sends)
	r, err := Measure("W9", fmt.Sprintf("lone router.Send, %d sequential sends, default options", W8Sends), W8Sends, func() error {
		for i := range W8Sends {
			t0 := time.Now()
			if _, err := rt.Send(ctx, Command(env, keys, i)); err != nil {
				return err
			}
			lat = append(lat, time.Since(t0))
		}
		return nil
	})
	if len(lat) > 0 {
		slices.Sort(lat)
		r.P50, r.P99 = pct(lat, 0.50), pct(lat, 0.99)
		r.Extra = fmt.Sprintf("p50=%s p99=%s max=%s", r.P50, r.P99, lat[len(lat)-1].Round(time.Microsecond))
	}
	return r, err
}
