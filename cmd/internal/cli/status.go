package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/kafkaconn"
)

// statusFlags holds the values of `workrouter status`'s flags.
type statusFlags struct {
	brokers []string
	topic   string
	group   string
	sink    string
	asJSON  bool
	timeout time.Duration

	partitioner string
	checkKeys   int
	conn        ConnFlags
}

func newStatusCmd() *cobra.Command {
	var f statusFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a group's members, owned partitions, offsets and lag (and the sink's fences)",
		Long: `status describes one consumer group on one topic:

  - its members (client id, member id, host) and the partitions each owns;
  - per partition: the log's start and end offsets, the group's committed
    Kafka offset, the lag (end - committed; end - start when nothing is
    committed), and its state: running, unowned, or stalled/blocked as the
    worker last reported it (since when, attempts, the last error);
  - with --sink: the sink's holder (epoch and member) for each partition,
    its checkpoint (NextOffset, the first offset not yet applied) beside
    Kafka's committed offset, the log that checkpoint refers to (this topic,
    or the ID of another: the topic was recreated), and the open dead
    letters. The sink, not Kafka, is the source of truth for where a worker
    resumes. Anything wrong is listed in words under "needs attention": a
    topic recreated, a log truncated below the checkpoint, records deleted
    before they were applied (how many), epochs that went backwards, a
    reset waiting for its claim, a stalled or blocked partition.

Both classic groups and KIP-848 consumer groups are described. A group or
topic that does not exist is an error. --json prints one JSON object.

It exits 0 when nothing needs attention, 2 when a partition does (stalled,
blocked, or a problem under "needs attention"; the report is printed
either way, and stderr names the partitions), and 1 on an error.

It also reads the last --check-keys records of every partition and counts
those whose key --partitioner maps to another partition: a producer that
partitions keys differently (see workrouter worker --partitioner).
` + ConnHelp,
		Example: `  workrouter status --group ledger-workers --topic ledger
  workrouter status --group ledger-workers --topic ledger --sink sqlite:ledger.db
  workrouter status --group billing --topic invoices --sink postgres://postgres@127.0.0.1:5432/test --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runStatus(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.brokers, "brokers", defaultBrokers, "seed brokers, comma-separated")
	fl.StringVar(&f.topic, "topic", "", "topic of commands (required)")
	fl.StringVar(&f.group, "group", "", "consumer group (required)")
	fl.StringVar(&f.sink, "sink", "", "also show the fences stored in this sink: "+sinkSpecHelp)
	fl.BoolVar(&f.asJSON, "json", false, "print one JSON object instead of tables")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "how long to wait for the brokers (and the sink)")
	fl.StringVar(&f.partitioner, "partitioner", "murmur2", "the producers' partitioner, to check keys against: murmur2 or crc32")
	fl.IntVar(&f.checkKeys, "check-keys", 100, "check the keys of the last N records of each partition against --partitioner (0 disables)")
	AddConnFlags(fl, &f.conn)
	return cmd
}

// The report status prints (and --json), admin.Status's.
type (
	statusReport    = admin.StatusReport
	statusPartition = admin.StatusPartition
	statusProblem   = admin.StatusProblem
)

func runStatus(cmd *cobra.Command, f statusFlags) error {
	switch {
	case f.group == "":
		return errors.New("--group is required")
	case f.topic == "":
		return errors.New("--topic is required")
	case f.timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	partitioner, err := envelope.ParsePartitioner(f.partitioner)
	if err != nil {
		return fmt.Errorf("--partitioner: %w", err)
	}
	if f.checkKeys < 0 {
		return fmt.Errorf("--check-keys must not be negative, got %d", f.checkKeys)
	}
	c, err := ResolveConn(cmd, f.conn, f.brokers)
	if err != nil {
		return err
	}
	brokers := c.brokers
	var spec sinkSpec
	if f.sink != "" {
		if spec, err = parseSinkSpec(f.sink); err != nil {
			return err
		}
	}
	parent := cmd.Context()
	gctx, stop := c.guard(parent)
	defer stop()
	ctx, cancel := context.WithTimeout(gctx, f.timeout)
	defer cancel()

	clientOpts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DialTimeout(min(f.timeout/2, 10*time.Second))}, c.opts...)
	cl, err := kgo.NewClient(clientOpts...)
	if err != nil {
		return fmt.Errorf("--brokers: %w", err)
	}
	defer cl.Close()

	req := admin.StatusRequest{Group: f.group, Topic: f.topic, CheckKeys: f.checkKeys, Partitioner: partitioner, ClientOpts: clientOpts}
	if f.sink != "" {
		s, closeSink, err := openAdminReadOnly(ctx, spec)
		if err != nil {
			return err
		}
		defer closeSink()
		req.Sink = s
		if ds, ok := deadLetterStoreOf(s); ok {
			req.DeadLetters = ds
		}
	}
	rep, err := admin.Status(ctx, cl, req)
	var connErr *kafkaconn.Error
	var sinkErr *admin.SinkError
	switch {
	case err == nil:
	case errors.As(err, &sinkErr):
		return fmt.Errorf("sink %s: %w", spec, sinkErr.Err)
	case errors.As(c.explain(err), &connErr):
		return fmt.Errorf("cannot connect to the brokers %s: %w", strings.Join(brokers, ","), connErr)
	case ctx.Err() != nil && parent.Err() == nil:
		return fmt.Errorf("no answer from the brokers %s within %s (--timeout); is a broker running there?",
			strings.Join(brokers, ","), f.timeout)
	case errors.Is(err, errTopicMissing):
		return topicMissingError(f.topic, f.group, brokers)
	case errors.As(err, new(*admin.UnreachableError)):
		return fmt.Errorf("cannot reach the brokers %s: %w", strings.Join(brokers, ","), err)
	default:
		return err
	}
	if f.sink != "" {
		rep.Sink = spec.String()
	}
	if f.asJSON {
		err = writeJSONErr(cmd.OutOrStdout(), rep)
	} else {
		err = printStatus(cmd.OutOrStdout(), rep)
	}
	if err != nil {
		return err
	}
	if ps := rep.NeedsAttention(); len(ps) > 0 {
		what := fmt.Sprintf("partitions %s need", joinInt32(ps))
		if len(ps) == 1 {
			what = fmt.Sprintf("partition %d needs", ps[0])
		}
		return &exitError{code: ExitNeedsAttention, err: fmt.Errorf("%s attention (exit status %d)", what, ExitNeedsAttention)}
	}
	return nil
}

// printStatus prints rep as a header line and two aligned tables.
func printStatus(w io.Writer, rep statusReport) error {
	ew := &errWriter{w: w}
	proto := rep.Protocol
	if rep.Assignor != "" {
		proto += ", " + rep.Assignor
	}
	if rep.GroupEpoch != nil {
		proto += ", epoch " + strconv.Itoa(int(*rep.GroupEpoch))
	}
	members := fmt.Sprintf("%d members", len(rep.Members))
	if len(rep.Members) == 1 {
		members = "1 member"
	}
	topicID := ""
	if rep.TopicID != "" {
		topicID = " (topic ID " + rep.TopicID + ")"
	}
	fmt.Fprintf(ew, "group %s (%s) on topic %s%s: %s, %s, total lag %d\n",
		rep.Group, proto, rep.Topic, topicID, rep.State, members, rep.TotalLag)
	if rep.Sink != "" {
		fmt.Fprintf(ew, "sink %s\n", rep.Sink)
	}
	if rep.Routing != nil {
		fmt.Fprintln(ew, routingLine(*rep.Routing))
	}

	fmt.Fprintln(ew)
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	if len(rep.Members) == 0 {
		fmt.Fprintln(tw, "no members")
	} else {
		fmt.Fprintln(tw, "MEMBER\tCLIENT\tHOST\tPARTITIONS")
		for _, m := range rep.Members {
			id := m.MemberID
			if m.InstanceID != "" {
				id += " (instance " + m.InstanceID + ")"
			}
			if m.MemberEpoch != nil {
				id += " @" + strconv.Itoa(int(*m.MemberEpoch))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", id, m.ClientID, m.Host, joinInt32(m.Partitions))
		}
	}
	tw.Flush()

	fmt.Fprintln(ew)
	tw = tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	header := "PARTITION\tOWNER\tSTART\tEND\tCOMMITTED\tLAG\tSTATE"
	if rep.Sink != "" {
		header += "\tSINK NEXT\tSINK LAG\tSINK LOG\tHOLDER EPOCH\tHOLDER MEMBER\tOPEN DEAD LETTERS\tDUPLICATES SKIPPED"
	}
	fmt.Fprintln(tw, header)
	for _, p := range rep.Partitions {
		owner, committed := "-", "-"
		if p.Owner != "" {
			owner = p.Owner
		}
		if p.Committed != nil {
			committed = strconv.FormatInt(*p.Committed, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%d\t%s", p.Partition, owner, p.StartOffset, p.EndOffset, committed, p.Lag, p.State)
		switch {
		case rep.Sink == "":
		case p.Sink == nil:
			fmt.Fprint(tw, "\t-\t-\t-\t-\t-\t-\t-")
		default:
			epoch, member, lag, log, dead := "none", "none", "?", "-", "-"
			if p.Sink.HolderEpoch != nil {
				epoch = strconv.Itoa(int(*p.Sink.HolderEpoch))
			}
			if p.Sink.HolderMember != "" {
				member = p.Sink.HolderMember
			}
			if p.Sink.Lag != nil {
				lag = strconv.FormatInt(*p.Sink.Lag, 10)
			}
			switch {
			case p.Sink.TopicID == "":
			case p.Sink.TopicID == rep.TopicID:
				log = "this topic"
			default:
				log = "other: " + p.Sink.TopicID
			}
			if p.Sink.OpenDeadLetters != nil {
				dead = strconv.Itoa(*p.Sink.OpenDeadLetters)
			}
			fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\t%s\t%d", p.Sink.NextOffset, lag, log, epoch, member, dead, p.Sink.Duplicates)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	// What needs attention, in words.
	var notes []string
	for _, p := range rep.Partitions {
		if p.StateSince != nil {
			notes = append(notes, fmt.Sprintf("partition %d: %s since %s (%s): %s", p.Partition, p.State,
				p.StateSince.UTC().Format(time.RFC3339), count(p.StateAttempts, "attempt"), oneLine(p.StateError)))
		}
		for _, pr := range p.Problems {
			notes = append(notes, fmt.Sprintf("partition %d: %s: %s", p.Partition, strings.ReplaceAll(pr.Kind, "_", " "), oneLine(pr.Detail)))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(ew)
		fmt.Fprintln(ew, "needs attention:")
		for _, n := range notes {
			fmt.Fprintln(ew, "  "+n)
		}
		if slices.ContainsFunc(rep.Partitions, func(p statusPartition) bool { return len(p.Problems) > 0 }) {
			fmt.Fprintln(ew, "  (workrouter fences reset --help says what to do for each case)")
		}
	}
	return ew.err
}

func joinInt32(ps []int32) string {
	if len(ps) == 0 {
		return "-"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// errWriter remembers the first write error, so that table printing can
// ignore errors until the end.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// writeJSONErr writes v as one line of JSON and reports write errors.
func writeJSONErr(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
