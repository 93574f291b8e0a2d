package bench

import (
	"context"
	"encoding/base32"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/envelope"
)

// Scale defaults (see SetupConfig).
const (
	// FullRecords is the number of pre-loaded commands of a full run.
	FullRecords = 1_000_000
	// QuickRecords is the number of pre-loaded commands of a --quick run.
	QuickRecords = 300_000
	// DefaultPartitions is the partition count of every benchmark topic.
	DefaultPartitions = 12
	// DefaultKeys is the number of distinct command keys.
	DefaultKeys = 10_000
	// DefaultSize is the payload size of every command in bytes.
	DefaultSize = 100
	// CommandType is the Type of every benchmark command.
	CommandType = "bench"
)

// SetupConfig configures Setup. Zero fields take the full-scale defaults
// (or QuickRecords for Records when Quick is set).
type SetupConfig struct {
	// Brokers, if set, is an existing cluster to run against; otherwise an
	// embedded kfake broker is started on 127.0.0.1:0.
	Brokers []string
	// Quick selects QuickRecords when Records is zero.
	Quick bool
	// Records is the number of commands pre-loaded into the topic.
	Records int
	// Partitions is the topic's partition count; default DefaultPartitions.
	Partitions int32
	// Keys is the number of distinct keys; default DefaultKeys.
	Keys int
	// Size is the payload size in bytes; default DefaultSize.
	Size int
	// PostgresDSN, if set, enables the PostgreSQL workloads.
	PostgresDSN string
	// RedisURL, if set, enables the Redis workloads (W2-redis, B3-redis).
	RedisURL string
	// TempDir is where SQLite files and the like go; default a fresh
	// directory under os.TempDir, removed by the cleanup function.
	TempDir string
	// Worker, if set, starts a `workrouter worker` process when its
	// arguments are appended (e.g. the workrouter-lab executable): W6 then
	// freezes a real worker process with SIGSTOP. Without it (go test
	// -bench), W6 simulates the freeze in process.
	Worker cluster.Binary
}

func (c SetupConfig) withDefaults() (SetupConfig, error) {
	if c.Records == 0 {
		c.Records = FullRecords
		if c.Quick {
			c.Records = QuickRecords
		}
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.Keys == 0 {
		c.Keys = DefaultKeys
	}
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Records < 0 || c.Partitions < 0 || c.Keys < 0 || c.Size < 0 {
		return c, errors.New("bench: negative records, partitions, keys or size")
	}
	return c, nil
}

// Setup starts the embedded broker (unless cfg.Brokers is set), creates a
// fresh topic of cfg.Partitions partitions and pre-loads it with
// cfg.Records commands (see Command, each with its CommandID), partitioned with envelope.Partition and
// encoded with envelope.Encode. The returned function closes everything Setup
// started, deletes the topic on external brokers, and returns every topic
// the run created and could not delete (a row's or this one); call it even
// after an error-free run.
func Setup(ctx context.Context, cfg SetupConfig) (*Env, func() error, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	env := &Env{
		Brokers:     cfg.Brokers,
		Topic:       UniqueName("bench-commands"),
		Partitions:  cfg.Partitions,
		Records:     cfg.Records,
		Keys:        cfg.Keys,
		Size:        cfg.Size,
		PostgresDSN: cfg.PostgresDSN,
		RedisURL:    cfg.RedisURL,
		TempDir:     cfg.TempDir,
		Worker:      cfg.Worker,
		drops:       &dropLog{},
	}
	if env.TempDir == "" {
		dir, err := os.MkdirTemp("", "workrouter-bench-")
		if err != nil {
			return nil, nil, fmt.Errorf("bench: temp dir: %w", err)
		}
		cleanups = append(cleanups, func() { os.RemoveAll(dir) })
		env.TempDir = dir
	}
	if len(env.Brokers) == 0 {
		b, err := broker.Start(broker.Config{Listen: "127.0.0.1:0", MinSessionTimeout: 100 * time.Millisecond})
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("bench: embedded broker: %w", err)
		}
		env.cluster = b.Cluster()
		cleanups = append(cleanups, func() { b.Close() })
		env.Brokers = []string{b.Addr()}
	}
	if err := CreateTopic(ctx, env, env.Topic); err != nil {
		cleanup()
		return nil, nil, err
	}
	if env.cluster == nil {
		// The embedded broker's topics go with it; an external
		// broker's stay unless deleted.
		cleanups = append(cleanups, func() {
			adm, err := kadm.NewOptClient(kgo.SeedBrokers(env.Brokers...))
			if err != nil {
				env.noteDrop(fmt.Errorf("bench: deleting topic %s: %w", env.Topic, err))
				return
			}
			defer adm.Close()
			dropTopics(env, adm, env.Topic)
		})
	}
	if err := preload(ctx, env); err != nil {
		cleanup()
		return nil, nil, err
	}
	return env, func() error {
		cleanup()
		env.drops.mu.Lock()
		defer env.drops.mu.Unlock()
		return errors.Join(env.drops.errs...)
	}, nil
}

// dropTopics deletes topics, waiting at most 10 s, and notes on env any
// it could not delete: Setup's cleanup returns them, so a run against a
// shared broker says what it left behind.
func dropTopics(env *Env, adm *kadm.Client, topics ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resps, err := adm.DeleteTopics(ctx, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		env.noteDrop(fmt.Errorf("bench: deleting topics %v: %w", topics, err))
	}
}

// noteDrop records a failed deletion for Setup's cleanup to return.
func (env *Env) noteDrop(err error) {
	env.drops.mu.Lock()
	defer env.drops.mu.Unlock()
	env.drops.errs = append(env.drops.errs, err)
}

// Cluster returns the kfake cluster of env's embedded broker, or nil if
// env runs against external brokers.
func Cluster(env *Env) *kfake.Cluster {
	return env.cluster
}

// UniqueName returns prefix followed by a random suffix (topics, groups,
// files, schemas), unlikely to collide within or across processes. It is
// made of lower-case letters, digits, '-' and '_' only.
func UniqueName(prefix string) string {
	return prefix + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "_" + strconv.FormatUint(rand.Uint64(), 36)
}

// CreateTopic creates topic with env.Partitions partitions (replication
// factor 1 on the embedded broker, the cluster default otherwise).
func CreateTopic(ctx context.Context, env *Env, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...))
	if err != nil {
		return fmt.Errorf("bench: client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	resp, err := adm.CreateTopic(ctx, env.Partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("bench: create topic %s: %w", topic, err)
	}
	return nil
}

// payload returns env's payload of env.Size bytes, shared and never
// modified.
func payload(env *Env) []byte {
	if len(env.payload) != env.Size {
		p := make([]byte, env.Size)
		for i := range p {
			p[i] = 'a' + byte(i%26)
		}
		env.payload = p
	}
	return env.payload
}

// Keys returns env's keys: "key-000000" … in order. Command i has key
// Keys[i%len].
func Keys(env *Env) [][]byte {
	keys := make([][]byte, max(env.Keys, 1))
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "key-%06d", i)
	}
	return keys
}

// Command returns the i-th benchmark command: key keys[i%len(keys)], Type
// CommandType and a shared payload of env.Size bytes.
func Command(env *Env, keys [][]byte, i int) envelope.Command {
	return envelope.Command{Key: keys[i%len(keys)], Type: CommandType, Payload: payload(env)}
}

// CommandID returns the ID the i-th pre-loaded command carries, in the
// router's format for the IDs it generates: 128 random bits in base32, a
// dash, and the sequence number i+1 in hex (the random part is the same
// for every command of env). The pre-loaded topic is what a producer
// using package router writes, and the deduplicating sinks record these
// IDs (W2, docs/performance.md).
func CommandID(env *Env, i int) string {
	if env.idPrefix == "" {
		var b [16]byte
		for j := range b {
			b[j] = byte(rand.Uint32())
		}
		env.idPrefix = base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]) + "-"
	}
	return env.idPrefix + strconv.FormatUint(uint64(i)+1, 16)
}

// producerOpts are the options of the pre-loading producer: big batches,
// no compression (so that every consumer decodes the same plain batches).
func producerOpts(env *Env) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(env.Brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(1 << 20),
		kgo.MaxBufferedRecords(100_000),
		kgo.ProducerLinger(5 * time.Millisecond),
	}
}

func preload(ctx context.Context, env *Env) error {
	cl, err := kgo.NewClient(producerOpts(env)...)
	if err != nil {
		return fmt.Errorf("bench: client: %w", err)
	}
	defer cl.Close()
	keys := Keys(env)
	var (
		errMu    sync.Mutex
		firstErr error
	)
	cb := func(_ *kgo.Record, err error) {
		if err != nil {
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
		}
	}
	for i := range env.Records {
		cmd := Command(env, keys, i)
		cmd.ID = CommandID(env, i)
		rec, err := envelope.Encode(env.Topic, envelope.Partition(cmd.Key, env.Partitions), cmd)
		if err != nil {
			return err
		}
		cl.Produce(ctx, rec, cb)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("bench: pre-load flush: %w", err)
	}
	errMu.Lock()
	defer errMu.Unlock()
	if firstErr != nil {
		return fmt.Errorf("bench: pre-load: %w", firstErr)
	}
	return nil
}
