package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink/kafka"
)

// kafkaSinkSpec is the part of a --sink kafka://… value past its kind.
type kafkaSinkSpec struct {
	// brokers are the hosts of the URL, comma-separated (a string, so
	// that a sinkSpec stays comparable); empty: the worker's --brokers.
	brokers string
	// events, checkpoints and deadLetters are the topics the sink writes
	// (empty: the defaults of kafkaTopics).
	events, checkpoints, deadLetters string
}

// kafkaSpecQuery are the query parameters a kafka://… --sink takes.
var kafkaSpecQuery = []string{"events-topic", "checkpoint-topic", "dead-letter-topic"}

// parseKafkaSpec parses --sink kafka://[HOST:PORT[,HOST:PORT…]][?events-topic=…&checkpoint-topic=…&dead-letter-topic=…]
// (or kafka: alone).
func parseKafkaSpec(s string) (sinkSpec, error) {
	_, rest, _ := strings.Cut(s, ":")
	if rest == "" {
		return sinkSpec{kind: "kafka"}, nil
	}
	if !strings.HasPrefix(rest, "//") {
		return sinkSpec{}, fmt.Errorf("--sink %q: want kafka://[HOST:PORT[,HOST:PORT]][?events-topic=…&checkpoint-topic=…&dead-letter-topic=…]", s)
	}
	hosts, query, _ := strings.Cut(strings.TrimPrefix(rest, "//"), "?")
	hosts = strings.TrimSuffix(hosts, "/")
	var ks kafkaSinkSpec
	var list []string
	if hosts != "" {
		if strings.Contains(hosts, "@") {
			return sinkSpec{}, fmt.Errorf("--sink kafka://…: no credentials in the URL: the connection flags (--tls, --sasl-*, -X, --properties) reach the sink's clients too")
		}
		for _, h := range strings.Split(hosts, ",") {
			if h = strings.TrimSpace(h); h == "" || strings.ContainsAny(h, "/ ") {
				return sinkSpec{}, fmt.Errorf("--sink %q: %q is not HOST:PORT", s, h)
			}
			list = append(list, h)
		}
		ks.brokers = strings.Join(list, ",")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return sinkSpec{}, fmt.Errorf("--sink %q: %v", s, err)
	}
	for k, v := range q {
		if len(v) != 1 || v[0] == "" {
			return sinkSpec{}, fmt.Errorf("--sink %q: give %s once, not empty", s, k)
		}
		switch k {
		case "events-topic":
			ks.events = v[0]
		case "checkpoint-topic":
			ks.checkpoints = v[0]
		case "dead-letter-topic":
			ks.deadLetters = v[0]
		default:
			return sinkSpec{}, fmt.Errorf("--sink %q: unknown parameter %q: want %s", s, k, strings.Join(kafkaSpecQuery, ", "))
		}
	}
	return sinkSpec{kind: "kafka", kafka: ks}, nil
}

// kafkaString describes a Kafka sink.
func (s sinkSpec) kafkaString() string {
	out := "kafka://" + s.kafka.brokers
	q := url.Values{}
	for k, v := range map[string]string{"events-topic": s.kafka.events, "checkpoint-topic": s.kafka.checkpoints, "dead-letter-topic": s.kafka.deadLetters} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) > 0 {
		out += "?" + q.Encode()
	}
	return out
}

// kafkaTopics returns the topics of a Kafka sink for the commands of
// topic: the spec's, else topic.events (ledger.events for the ledger's
// own topic), topic.sink-checkpoints and topic.dead-letters.
func (s sinkSpec) kafkaTopics(topic string) (events, checkpoints, deadLetters string) {
	events, checkpoints, deadLetters = s.kafka.events, s.kafka.checkpoints, s.kafka.deadLetters
	if events == "" {
		events = topic + ".events"
	}
	if checkpoints == "" {
		checkpoints = topic + ".sink-checkpoints"
	}
	if deadLetters == "" {
		deadLetters = topic + ".dead-letters"
	}
	return events, checkpoints, deadLetters
}

// errKafkaNoAdmin is matched by the error of the admin commands (fences,
// status --sink, dlq) given --sink kafka://….
var errKafkaNoAdmin = errors.New("the Kafka sink keeps no fence rows, claim history or dead-letter table")

// kafkaAdminError is the refusal of an admin command on spec, a Kafka
// sink: what it would read or reset lives in Kafka itself.
func kafkaAdminError(spec sinkSpec) error {
	return fmt.Errorf("--sink %s: %w for this command to read or reset: its checkpoint is the consumer group's committed offset "+
		"(workrouter status --group … without --sink, or kafka-consumer-groups --describe / --reset-offsets), and its dead letters are "+
		"records of its dead-letter topic (dead-letter-topic=…, default <topic>.dead-letters); see docs/kafka-sink.md",
		spec, errKafkaNoAdmin)
}

// ensureKafkaTopics creates the sink's topics that do not exist: the
// events topic with as many partitions as the commands' topic (at least
// one), the checkpoint and dead-letter topics with one. It says so on
// logger for each it creates.
func ensureKafkaTopics(ctx context.Context, cl *kgo.Client, topic, events, checkpoints, deadLetters string, logger *slog.Logger) error {
	adm := kadm.NewClient(cl)
	md, err := adm.Metadata(ctx, topic, events, checkpoints, deadLetters)
	if err != nil {
		return fmt.Errorf("--sink kafka: metadata: %w", err)
	}
	parts := int32(1)
	if td, ok := md.Topics[topic]; ok && td.Err == nil && len(td.Partitions) > 0 {
		parts = int32(len(td.Partitions))
	}
	compact := "compact"
	for _, t := range []struct {
		name    string
		parts   int32
		configs map[string]*string
	}{{events, parts, nil}, {checkpoints, 1, map[string]*string{"cleanup.policy": &compact}}, {deadLetters, 1, nil}} {
		if td, ok := md.Topics[t.name]; ok && td.Err == nil {
			continue
		}
		_, err := adm.CreateTopic(ctx, t.parts, -1, t.configs, t.name)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("--sink kafka: creating topic %s: %w", t.name, err)
		}
		logger.Info("created a topic of the Kafka sink", "topic", t.name, "partitions", t.parts)
	}
	return nil
}

// serveKafkaWorker runs the worker of RunWorker on a Kafka sink: the
// ledger example only, its decisions published to the events topic.
func serveKafkaWorker(cmd *cobra.Command, f WorkerFlags, c Conn, spec sinkSpec, protocol consumer.Protocol, reg *prometheus.Registry, logger *slog.Logger, h *WorkerHooks) error {
	switch {
	case f.example != "ledger":
		return fmt.Errorf("--example %s: on a Kafka sink the worker runs the ledger example only", f.example)
	case f.dedupeWindow != 0:
		return fmt.Errorf("--dedupe-window: the Kafka sink keeps no window of command IDs (the ledger decides a command once by the IDs in its events topic); leave it out")
	case f.keyConcurrency != 1:
		return fmt.Errorf("--key-concurrency %d: the Kafka sink's checkpoint is the committed offset, which cannot hold the gaps of lanes: leave it at 1", f.keyConcurrency)
	}
	ctx := cmd.Context()
	brokers := c.brokers
	if spec.kafka.brokers != "" {
		brokers = strings.Split(spec.kafka.brokers, ",")
	}
	events, checkpoints, deadLetters := spec.kafkaTopics(f.topic)
	// The harness's dialer (h.KafkaSinkOpts) comes last: it replaces
	// any dialer of the connection flags.
	opts := append(slices.Clone(c.opts), h.kafkaSinkOpts()...)
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return fmt.Errorf("--sink %s: %w", spec, err)
	}
	err = ensureKafkaTopics(ctx, cl, f.topic, events, checkpoints, deadLetters, logger)
	cl.Close()
	if err != nil {
		return err
	}
	s, err := kafka.New(ctx, kafka.Config{Brokers: brokers, CheckpointTopic: checkpoints, DeadLetterTopic: deadLetters,
		TransactionalID: "workrouter-" + f.group, Logger: logger, ClientOpts: opts})
	if err != nil {
		return fmt.Errorf("--sink %s: %w", spec, err)
	}
	defer s.Close()
	l, err := ledger.NewKafka(ledger.KafkaConfig{Brokers: brokers, EventsTopic: events, ClientOpts: opts})
	if err != nil {
		return err
	}
	defer l.Close()
	logger.Info("Kafka sink", "events_topic", events, "checkpoint_topic", checkpoints, "dead_letter_topic", deadLetters)
	return serveWorker[*kafka.Tx](cmd, f, c, spec, protocol, "kafka", s, l.Handlers(), reg, logger, h.kafkaHook(), h.lagEvery(), nil)
}

// KafkaHarnessSink reports whether the --sink of the demo or the chaos
// harness selects the Kafka sink: "kafka", "kafka:" or "kafka://", on the
// harness's own broker. Hosts or topics are refused: the harness makes
// topics of its own on the broker that carries the commands.
func KafkaHarnessSink(v string) (bool, error) {
	v = strings.TrimSpace(v)
	scheme, rest, _ := strings.Cut(v, ":")
	if !strings.EqualFold(scheme, "kafka") {
		return false, nil
	}
	if rest != "" && rest != "//" {
		return false, fmt.Errorf("--sink %q: give --sink kafka alone: the outputs go to topics of the run's own on the broker that carries the commands (the embedded one, or --brokers)", v)
	}
	return true, nil
}
