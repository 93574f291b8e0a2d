package main

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
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/kafkaconn"
	"github.com/workrouter/workrouter/sink"
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
	conn        connFlags
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

It also reads the last --check-keys records of every partition and counts
those whose key --partitioner maps to another partition: a producer that
partitions keys differently (see workrouter worker --partitioner).
` + connHelp,
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
	addConnFlags(fl, &f.conn)
	return cmd
}

// statusReport is what `status --json` prints.
type statusReport struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// TopicID is the topic's ID as Kafka's tools print it (empty for a
	// broker without topic IDs).
	TopicID string `json:"topic_id,omitempty"`
	// Protocol is "classic" or "consumer" (KIP-848).
	Protocol string `json:"protocol"`
	State    string `json:"state"`
	// Assignor is the classic protocol's balancer or the KIP-848 assignor.
	Assignor string `json:"assignor,omitempty"`
	// GroupEpoch is the KIP-848 group epoch (absent for classic groups).
	GroupEpoch *int32            `json:"group_epoch,omitempty"`
	Members    []statusMember    `json:"members"`
	Partitions []statusPartition `json:"partitions"`
	TotalLag   int64             `json:"total_lag"`
	// Sink names the sink whose fences are shown (no password).
	Sink string `json:"sink,omitempty"`
	// Routing is the check of recent records' keys against the
	// partitioner; absent with --check-keys 0.
	Routing *routingReport `json:"routing,omitempty"`
}

type statusMember struct {
	ClientID   string `json:"client_id"`
	MemberID   string `json:"member_id"`
	Host       string `json:"host"`
	InstanceID string `json:"instance_id,omitempty"`
	// MemberEpoch is the KIP-848 member epoch (absent for classic groups).
	MemberEpoch *int32 `json:"member_epoch,omitempty"`
	// Partitions are the partitions of the topic this member owns.
	Partitions []int32 `json:"partitions"`
}

type statusPartition struct {
	Partition int32 `json:"partition"`
	// Owner is the member id of the member that owns it; empty if none.
	Owner       string `json:"owner,omitempty"`
	StartOffset int64  `json:"start_offset"`
	EndOffset   int64  `json:"end_offset"`
	// Committed is the group's committed Kafka offset; null if none.
	Committed *int64 `json:"committed"`
	Lag       int64  `json:"lag"`
	// State is what the worker last reported in the committed offset's
	// metadata: "stalled" or "blocked" (with since, attempts and the last
	// error); else "blocked" when a member owns the partition but --sink
	// shows a problem that refuses its claims, "running" when a member owns
	// it, and "unowned" when none does.
	State         string     `json:"state"`
	StateSince    *time.Time `json:"state_since,omitempty"`
	StateAttempts int        `json:"state_attempts,omitempty"`
	StateError    string     `json:"state_error,omitempty"`
	// Sink is the sink's fence for the partition; absent without --sink
	// or when the sink has never seen the partition.
	Sink *statusFence `json:"sink,omitempty"`
	// Problems are what is wrong with the partition's fence, the log and
	// the group, in words (see workrouter fences diagnose); empty when
	// nothing is.
	Problems []statusProblem `json:"problems,omitempty"`
}

// statusProblem is one thing wrong with a partition (admin.Problem).
type statusProblem struct {
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

type statusFence struct {
	// HolderEpoch and HolderMember are the stored holder; null/empty after
	// an admin reset, until the next claim.
	HolderEpoch  *int32 `json:"holder_epoch"`
	HolderMember string `json:"holder_member"`
	// NextOffset is the sink's checkpoint: the first offset not applied.
	NextOffset int64 `json:"next_offset"`
	// TopicID is the log NextOffset refers to (Kafka's topic ID); empty
	// before the first claim that saw one.
	TopicID string `json:"topic_id"`
	// ProofRequired: the fence was reset and the next claim must prove
	// its membership.
	ProofRequired bool `json:"proof_required,omitempty"`
	// ProofBelow: every claim at an epoch below it must prove its
	// membership, for good (a reset cleared epoch ProofBelow-1).
	ProofBelow int64 `json:"proof_below,omitempty"`
	// Lag is end offset - NextOffset; null when NextOffset is not an
	// offset of the log as it is (the log changed under it).
	Lag *int64 `json:"lag"`
	// OpenDeadLetters counts the partition's dead letters still open;
	// null for a sink that stores none.
	OpenDeadLetters *int `json:"open_dead_letters"`
}

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
	c, err := resolveConn(cmd, f.conn, f.brokers)
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

	rep, err := describeStatus(ctx, cl, f.group, f.topic)
	var connErr *kafkaconn.Error
	switch {
	case err == nil:
	case errors.As(c.explain(err), &connErr):
		return fmt.Errorf("cannot connect to the brokers %s: %w", strings.Join(brokers, ","), connErr)
	case ctx.Err() != nil && parent.Err() == nil:
		return fmt.Errorf("no answer from the brokers %s within %s (--timeout); is a broker running there?",
			strings.Join(brokers, ","), f.timeout)
	case errors.Is(err, errTopicMissing):
		return topicMissingError(f.topic, f.group, brokers)
	case errors.As(err, new(unreachableError)):
		return fmt.Errorf("cannot reach the brokers %s: %w", strings.Join(brokers, ","), err)
	default:
		return err
	}
	if f.checkKeys > 0 {
		if err := checkRouting(ctx, clientOpts, &rep, partitioner, f.checkKeys); err != nil {
			return err
		}
	}
	if f.sink != "" {
		if err := addSinkFences(ctx, cl, &rep, spec); err != nil {
			return err
		}
	}
	if f.asJSON {
		return writeJSONErr(cmd.OutOrStdout(), rep)
	}
	return printStatus(cmd.OutOrStdout(), rep)
}

// unreachableError marks the failure of status's first request to the
// brokers.
type unreachableError struct{ err error }

func (e unreachableError) Error() string { return e.err.Error() }
func (e unreachableError) Unwrap() error { return e.err }

// describeStatus reads the group and the topic's offsets from Kafka.
func describeStatus(ctx context.Context, cl *kgo.Client, group, topic string) (statusReport, error) {
	adm := kadm.NewClient(cl)
	rep := statusReport{Group: group, Topic: topic, Members: []statusMember{}, Partitions: []statusPartition{}}

	topics, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return rep, unreachableError{fmt.Errorf("reading topic %q: %w", topic, err)}
	}
	td, ok := topics[topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return rep, errTopicMissing
	}
	if td.Err != nil {
		return rep, fmt.Errorf("reading topic %q: %w", topic, td.Err)
	}

	if td.ID != (kadm.TopicID{}) {
		rep.TopicID = sink.FormatTopicID(td.ID)
	}
	if err := describeGroup(ctx, cl, &rep, td.ID); err != nil {
		return rep, err
	}

	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return rep, fmt.Errorf("listing end offsets of %q: %w", topic, err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return rep, fmt.Errorf("listing start offsets of %q: %w", topic, err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return rep, fmt.Errorf("fetching the committed offsets of group %q: %w", group, err)
	}

	owners := make(map[int32]string)
	for _, m := range rep.Members {
		for _, p := range m.Partitions {
			owners[p] = m.MemberID
		}
	}
	parts := td.Partitions.Numbers()
	slices.Sort(parts)
	for _, p := range parts {
		sp := statusPartition{Partition: p, Owner: owners[p]}
		if o, ok := ends.Lookup(topic, p); ok {
			sp.EndOffset = o.Offset
		}
		if o, ok := starts.Lookup(topic, p); ok {
			sp.StartOffset = o.Offset
		}
		sp.Lag = sp.EndOffset - sp.StartOffset
		sp.State = "unowned"
		if sp.Owner != "" {
			sp.State = "running"
		}
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At >= 0 {
			at := c.At
			sp.Committed = &at
			sp.Lag = max(sp.EndOffset-at, 0)
			if st, since, attempts, lastErr, ok := consumer.ParseStateMetadata(c.Metadata); ok && sp.Owner != "" {
				sp.State, sp.StateSince, sp.StateAttempts, sp.StateError = string(st), &since, attempts, lastErr
			}
		}
		rep.TotalLag += sp.Lag
		rep.Partitions = append(rep.Partitions, sp)
	}
	return rep, nil
}

// describeGroup fills the group's protocol, state and members: it asks
// with the classic DescribeGroups first, and with the KIP-848
// ConsumerGroupDescribe when the classic answer does not know the group or
// shows no members (a KIP-848 group looks like that to DescribeGroups).
func describeGroup(ctx context.Context, cl *kgo.Client, rep *statusReport, topicID kadm.TopicID) error {
	adm := kadm.NewClient(cl)
	group, topic := rep.Group, rep.Topic
	classic, cerr := adm.DescribeGroups(ctx, group)
	var (
		cg      kadm.DescribedGroup
		cgKnown bool
	)
	if cerr == nil {
		cg, cgKnown = classic[group]
		cgKnown = cgKnown && cg.Err == nil && cg.State != "Dead" && cg.State != ""
		if cg.Err != nil && !errors.Is(cg.Err, kerr.GroupIDNotFound) {
			cerr = cg.Err
		}
	}
	if cerr != nil && ctx.Err() != nil {
		return fmt.Errorf("describing group %q: %w", group, cerr)
	}
	if !cgKnown || len(cg.Members) == 0 {
		found, err := describeConsumerGroup(ctx, cl, rep, topicID)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("describing group %q: %w", group, err)
		}
		if found {
			return nil
		}
	}
	if cerr != nil {
		return fmt.Errorf("describing group %q: %w", group, cerr)
	}
	if !cgKnown {
		return fmt.Errorf("group %q does not exist (no members and no committed offsets)", group)
	}
	rep.Protocol, rep.State, rep.Assignor = "classic", cg.State, cg.Protocol
	for _, m := range cg.Members {
		sm := statusMember{ClientID: m.ClientID, MemberID: m.MemberID, Host: m.ClientHost, Partitions: []int32{}}
		if m.InstanceID != nil {
			sm.InstanceID = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				if t.Topic == topic {
					sm.Partitions = append(sm.Partitions, t.Partitions...)
				}
			}
			slices.Sort(sm.Partitions)
		}
		rep.Members = append(rep.Members, sm)
	}
	return nil
}

// describeConsumerGroup describes a KIP-848 consumer group with
// ConsumerGroupDescribe. It matches assignments by topic ID as well as by
// name (some brokers send only the ID), which kadm's helper cannot. It
// reports false if the group is not a KIP-848 group or does not exist.
func describeConsumerGroup(ctx context.Context, cl *kgo.Client, rep *statusReport, topicID kadm.TopicID) (bool, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{rep.Group}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return false, err
	}
	var g *kmsg.ConsumerGroupDescribeResponseGroup
	for i := range resp.Groups {
		if resp.Groups[i].Group == rep.Group {
			g = &resp.Groups[i]
		}
	}
	if g == nil || g.ErrorCode != 0 || g.State == "Dead" {
		return false, nil
	}
	rep.Protocol, rep.State, rep.Assignor = "consumer", g.State, g.AssignorName
	epoch := g.Epoch
	rep.GroupEpoch = &epoch
	for _, m := range g.Members {
		me := m.MemberEpoch
		sm := statusMember{ClientID: m.ClientID, MemberID: m.MemberID, Host: m.ClientHost, MemberEpoch: &me, Partitions: []int32{}}
		if m.InstanceID != nil {
			sm.InstanceID = *m.InstanceID
		}
		for _, tp := range m.Assignment.TopicPartitions {
			if tp.Topic == rep.Topic || (topicID != (kadm.TopicID{}) && tp.TopicID == topicID) {
				sm.Partitions = append(sm.Partitions, tp.Partitions...)
			}
		}
		slices.Sort(sm.Partitions)
		sm.Partitions = slices.Compact(sm.Partitions)
		rep.Members = append(rep.Members, sm)
	}
	slices.SortFunc(rep.Members, func(a, b statusMember) int { return strings.Compare(a.MemberID, b.MemberID) })
	return true, nil
}

// addSinkFences adds the sink's fences of the group and topic to rep, with
// each partition's problems (admin.Diagnose) and open dead letters.
func addSinkFences(ctx context.Context, cl *kgo.Client, rep *statusReport, spec sinkSpec) error {
	s, closeSink, err := openAdminReadOnly(ctx, spec)
	if err != nil {
		return err
	}
	defer closeSink()
	reports, err := admin.Diagnose(ctx, cl, s, rep.Group, rep.Topic)
	if err != nil {
		return fmt.Errorf("sink %s: %w", spec, err)
	}
	rep.Sink = spec.String()
	byPart := make(map[int32]admin.Report)
	for _, r := range reports {
		byPart[r.Fence.Scope.Partition] = r
	}
	var open map[int32]int
	if ds, ok := deadLetterStoreOf(s); ok {
		dls, err := ds.DeadLetters(ctx, sink.DeadLetterFilter{Group: rep.Group, Topic: rep.Topic, States: []sink.DeadLetterState{sink.DeadLetterOpen}})
		if err != nil {
			return fmt.Errorf("sink %s: reading dead letters: %w", spec, err)
		}
		open = make(map[int32]int)
		for _, d := range dls {
			open[d.Scope.Partition]++
		}
	}
	for i := range rep.Partitions {
		p := &rep.Partitions[i]
		r, ok := byPart[p.Partition]
		if !ok {
			continue
		}
		f := r.Fence
		sf := &statusFence{HolderMember: f.Holder.Member, NextOffset: f.NextOffset, TopicID: f.TopicID, ProofRequired: f.ProofRequired,
			ProofBelow: f.ProofBelow}
		if !f.Holder.IsZero() {
			e := f.Holder.Epoch
			sf.HolderEpoch = &e
		}
		if open != nil {
			n := open[p.Partition]
			sf.OpenDeadLetters = &n
		}
		logChanged := false
		for _, pr := range r.Problems {
			p.Problems = append(p.Problems, statusProblem{Kind: string(pr.Kind), Detail: pr.Detail})
			logChanged = logChanged || pr.Kind == admin.TopicRecreated || pr.Kind == admin.LogTruncated || pr.Kind == admin.RetentionLoss
		}
		if !logChanged {
			lag := max(p.EndOffset-f.NextOffset, 0)
			sf.Lag = &lag
		}
		if len(r.Problems) > 0 && p.State == "running" {
			p.State = "blocked" // its owner's claims are refused: see the problems
		}
		if f.ProofRequired {
			p.Problems = append(p.Problems, statusProblem{Kind: "reset_pending",
				Detail: "the fence was reset; the next claim must prove its membership (a running worker claims again within its reclaim interval)"})
		}
		p.Sink = sf
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
		fmt.Fprintln(ew, rep.Routing.line())
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
		header += "\tSINK NEXT\tSINK LAG\tSINK LOG\tHOLDER EPOCH\tHOLDER MEMBER\tOPEN DEAD LETTERS"
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
			fmt.Fprint(tw, "\t-\t-\t-\t-\t-\t-")
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
			fmt.Fprintf(tw, "\t%d\t%s\t%s\t%s\t%s\t%s", p.Sink.NextOffset, lag, log, epoch, member, dead)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	// What needs attention, in words.
	var notes []string
	for _, p := range rep.Partitions {
		if p.StateSince != nil {
			notes = append(notes, fmt.Sprintf("partition %d: %s since %s (%d attempts): %s", p.Partition, p.State,
				p.StateSince.UTC().Format(time.RFC3339), p.StateAttempts, oneLine(p.StateError)))
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
