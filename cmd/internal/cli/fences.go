package cli

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	goredis "github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/redisstore"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/sink"
)

func newFencesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fences",
		Short: "List, inspect and (audited) reset the fences stored in a sink",
		Long: `fences reads and administers the fencing state a sink stores per scope
(group, topic, partition): the holder token {epoch, member} of the current
tenure and NextOffset, the first Kafka offset not yet applied.

  fences list     every scope's holder, NextOffset and the log it refers to
  fences history  the accepted claims and the admin resets of one scope
  fences reset    diagnose a scope whose claims are refused for good (epochs
                  that went backwards, a topic recreated, a log truncated,
                  records deleted before they were applied) and reset its
                  fence: --keep-checkpoint or --restart-at, a compare-and-set
                  on the fence you inspected, refused without a cause unless
                  --force, audited with its reason. Without --yes it only
                  shows the diagnosis and what it would change.
  fences reset-resource
                  reset the scope of a fenced resource's token store
                  (fencehttp's sqlstore or redisstore) that refuses the
                  sink's holder after the group was recreated: it stores
                  the holder, pinned so that the group's previous
                  incarnation stays refused; dry run without --yes.`,
		Example: `  workrouter fences list --sink sqlite:ledger.db
  workrouter fences history --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3 \
      --keep-checkpoint --reason "group recreated (INC-123)"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("fences needs a subcommand: list, history, reset or reset-resource (see workrouter fences --help)")
		},
	}
	cmd.AddCommand(newFencesListCmd(), newFencesHistoryCmd(), newFencesResetCmd(), newFencesResetResourceCmd())
	return cmd
}

// fencesFlags holds the flags shared by the fences subcommands.
type fencesFlags struct {
	sink      string
	group     string
	topic     string
	partition int32
	all       bool
	reason    string
	yes       bool
	asJSON    bool
	timeout   time.Duration
	// reset
	keep      bool
	restartAt string
	expect    []string
	force     bool
	brokers   []string
	conn      ConnFlags
	// readOnly opens the sink read-only (list, history): see
	// openAdminReadOnly.
	readOnly bool
}

func (f *fencesFlags) addCommon(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.sink, "sink", "", "the sink: "+sinkSpecHelp+" (required)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the sink (and for the brokers or the --store, where the command reaches them)")
}

// openFenceSink validates --sink and --timeout and opens the sink.
func openFenceSink(cmd *cobra.Command, f fencesFlags) (context.Context, adminSink, sinkSpec, func(), error) {
	if f.sink == "" {
		return nil, nil, sinkSpec{}, nil, fmt.Errorf("--sink is required: %s", sinkSpecHelp)
	}
	if f.timeout <= 0 {
		return nil, nil, sinkSpec{}, nil, fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	spec, err := parseSinkSpec(f.sink)
	if err != nil {
		return nil, nil, sinkSpec{}, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	open := openAdmin
	if f.readOnly {
		open = openAdminReadOnly
	}
	s, closeSink, err := open(ctx, spec)
	if err != nil {
		cancel()
		return nil, nil, sinkSpec{}, nil, err
	}
	return ctx, s, spec, func() { closeSink(); cancel() }, nil
}

// fenceJSON is a fence as the fences commands print it in JSON.
type fenceJSON struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	// HolderEpoch is null and HolderMember empty when the holder was reset.
	HolderEpoch  *int32 `json:"holder_epoch"`
	HolderMember string `json:"holder_member"`
	NextOffset   int64  `json:"next_offset"`
	// TopicID is the log NextOffset refers to; empty before the first
	// claim that saw one.
	TopicID string `json:"topic_id"`
	// ProofRequired: the fence was reset at least once; every claim but
	// the holder's own re-claim must prove its membership, for good.
	ProofRequired bool `json:"proof_required"`
	// Duplicates counts the records the sink skipped in the scope because
	// their command ID was applied already (sink.Fence.Duplicates).
	Duplicates int64 `json:"duplicates_skipped"`
	// DoneSpans are the offsets above NextOffset that lanes applied
	// already (sink.Fence.Done), as "from-to,…" (to excluded, each a
	// sink.Span's String); empty if none.
	DoneSpans string `json:"done_spans,omitempty"`
}

func toFenceJSON(f sink.Fence) fenceJSON {
	out := fenceJSON{Group: f.Scope.Group, Topic: f.Scope.Topic, Partition: f.Scope.Partition,
		HolderMember: f.Holder.Member, NextOffset: f.NextOffset, TopicID: f.TopicID, ProofRequired: f.ProofRequired,
		Duplicates: f.Duplicates, DoneSpans: spansText(f.Done)}
	if !f.Holder.IsZero() {
		e := f.Holder.Epoch
		out.HolderEpoch = &e
	}
	return out
}

// proofText says which claims on f must prove their membership
// (sink.Fence.ProofRequired); empty if none.
func proofText(f sink.Fence) string {
	switch {
	case f.ProofRequired && f.Holder.IsZero():
		return "reset: the next claim must prove its membership, and every claim after it, for good"
	case f.ProofRequired:
		return "reset earlier: every claim but the holder's own must prove its membership"
	}
	return ""
}

// doneText renders done spans above a checkpoint's NextOffset for the
// tables: how many offsets in how many spans, "-" for none.
func doneText(spans []sink.Span) string {
	if len(spans) == 0 {
		return "-"
	}
	var n int64
	for _, sp := range spans {
		n += sp.To - sp.From
	}
	if len(spans) == 1 {
		return fmt.Sprintf("%d in 1 span (%d-%d)", n, spans[0].From, spans[0].To-1)
	}
	return fmt.Sprintf("%d in %d spans (%d-%d)", n, len(spans), spans[0].From, spans[len(spans)-1].To-1)
}

// holderText renders a fence's holder for tables and messages.
func holderText(t epochs.Token) string {
	if t.IsZero() {
		return "none (reset)"
	}
	return fmt.Sprintf("epoch %d member %s", t.Epoch, t.Member)
}

func newFencesListCmd() *cobra.Command {
	f := fencesFlags{readOnly: true}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every scope's holder epoch, member and NextOffset",
		Example: `  workrouter fences list --sink sqlite:ledger.db
  workrouter fences list --sink postgres://postgres@127.0.0.1:5432/test --group ledger-workers --topic ledger --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, s, _, done, err := openFenceSink(cmd, f)
			if err != nil {
				return err
			}
			defer done()
			all, err := s.Fences(ctx)
			if err != nil {
				return fmt.Errorf("reading fences: %w", err)
			}
			fs := filterFences(all, f.group, f.topic)
			out := cmd.OutOrStdout()
			if f.asJSON {
				rows := make([]fenceJSON, len(fs))
				for i, fe := range fs {
					rows[i] = toFenceJSON(fe)
				}
				return writeJSONErr(out, rows)
			}
			return printFences(out, fs)
		},
	}
	f.addCommon(cmd)
	cmd.Flags().StringVar(&f.group, "group", "", "only this consumer group")
	cmd.Flags().StringVar(&f.topic, "topic", "", "only this topic")
	notEmpty(cmd.Flags(), "group", "topic")
	return cmd
}

func printFences(w io.Writer, fs []sink.Fence) error {
	ew := &errWriter{w: w}
	if len(fs) == 0 {
		fmt.Fprintln(ew, "no fences")
		return ew.err
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tHOLDER EPOCH\tHOLDER MEMBER\tNEXT OFFSET\tDONE ABOVE\tTOPIC ID\tDUPLICATES SKIPPED\tNOTE")
	for _, fe := range fs {
		epoch, member := "none", "none"
		if !fe.Holder.IsZero() {
			epoch, member = strconv.Itoa(int(fe.Holder.Epoch)), fe.Holder.Member
		}
		note := proofText(fe)
		if note == "" {
			note = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%s\t%s\t%d\t%s\n", fe.Scope.Group, fe.Scope.Topic, fe.Scope.Partition, epoch, member, fe.NextOffset, doneText(fe.Done), orDash(fe.TopicID), fe.Duplicates, note)
	}
	tw.Flush()
	return ew.err
}

// scopeFlags adds --group, --topic and --partition.
func (f *fencesFlags) addScope(cmd *cobra.Command, partitionUsage string) {
	fl := cmd.Flags()
	fl.StringVar(&f.group, "group", "", "consumer group (required)")
	fl.StringVar(&f.topic, "topic", "", "topic (required)")
	fl.Int32Var(&f.partition, "partition", 0, partitionUsage)
}

// checkScope validates --group, --topic and (unless allowAll) --partition.
func checkScope(cmd *cobra.Command, f fencesFlags, allowAll bool) error {
	switch {
	case f.group == "":
		return errors.New("--group is required")
	case f.topic == "":
		return errors.New("--topic is required")
	case !cmd.Flags().Changed("partition") && !(allowAll && f.all):
		if allowAll {
			return errors.New("--partition is required (or --all for every partition)")
		}
		return errors.New("--partition is required")
	case f.partition < -1 || (f.partition == -1 && !allowAll):
		return fmt.Errorf("--partition must be a partition number (0 or more), got %d", f.partition)
	}
	return nil
}

func newFencesHistoryCmd() *cobra.Command {
	f := fencesFlags{readOnly: true}
	cmd := &cobra.Command{
		Use:   "history",
		Short: "Show the accepted claims and admin resets of one scope, oldest first",
		Example: `  workrouter fences history --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3
  workrouter fences history --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkScope(cmd, f, false); err != nil {
				return err
			}
			ctx, s, _, done, err := openFenceSink(cmd, f)
			if err != nil {
				return err
			}
			defer done()
			scope := epochs.Scope{Group: f.group, Topic: f.topic, Partition: f.partition}
			hs, err := s.History(ctx, scope)
			if err != nil {
				return fmt.Errorf("reading the history of %s: %w", scope, err)
			}
			if len(hs) == 0 {
				return fmt.Errorf("%w: the sink has no history for %s", sink.ErrNotFound, scope)
			}
			out := cmd.OutOrStdout()
			if f.asJSON {
				type row struct {
					Seq        int64  `json:"seq"`
					Kind       string `json:"kind"`
					Epoch      *int32 `json:"epoch"`
					Member     string `json:"member"`
					NextOffset int64  `json:"next_offset"`
					// DoneSpans: a claim's done spans above NextOffset
					// (fenceadmin.Entry.Done), "from-to,…", to excluded.
					DoneSpans string `json:"done_spans,omitempty"`
					TopicID   string `json:"topic_id"`
					Reason    string `json:"reason,omitempty"`
					// Detail is a reset's audit of what the operator saw
					// (JSON written by package admin).
					Detail string    `json:"detail,omitempty"`
					At     time.Time `json:"at"`
				}
				rows := make([]row, len(hs))
				for i, h := range hs {
					rows[i] = row{Seq: h.Seq, Kind: h.Kind, Member: h.Token.Member, NextOffset: h.NextOffset, DoneSpans: spansText(h.Done), TopicID: h.TopicID, Reason: h.Reason, Detail: h.Detail, At: h.At}
					if !h.Token.IsZero() {
						e := h.Token.Epoch
						rows[i].Epoch = &e
					}
				}
				return writeJSONErr(out, rows)
			}
			ew := &errWriter{w: out}
			fmt.Fprintf(ew, "history of %s\n\n", scope)
			tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tKIND\tEPOCH\tMEMBER\tNEXT OFFSET\tDONE ABOVE\tTOPIC ID\tAT\tREASON")
			for _, h := range hs {
				epoch, member := "-", "-"
				if !h.Token.IsZero() {
					epoch, member = strconv.Itoa(int(h.Token.Epoch)), h.Token.Member
				}
				reason := h.Reason
				if reason == "" {
					reason = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", h.Seq, h.Kind, epoch, member, h.NextOffset, doneText(h.Done), orDash(h.TopicID),
					h.At.UTC().Format(time.RFC3339), oneLine(reason))
			}
			tw.Flush()
			return ew.err
		},
	}
	f.addCommon(cmd)
	f.addScope(cmd, "partition (required)")
	return cmd
}

func newFencesResetCmd() *cobra.Command {
	var f fencesFlags
	cmd := &cobra.Command{
		Use:   "reset",
		Short: "Reset a scope's fence, audited and guarded, when its claims are refused for good",
		Long: `reset is the operator's way out when a partition's claims are refused for
a reason no retry fixes. It first diagnoses each scope from the sink's fence,
the log on the brokers and the live group, and says what is wrong:

  what status and the worker say          what you run
  epochs went backwards (the group was     --keep-checkpoint: the log is intact,
    deleted and recreated, a coordinator     the checkpoint stays; nothing is
    lost its state); holder gone             applied twice or skipped
  topic recreated (a new topic ID)         --restart-at earliest (apply the new
                                             log from its start) or latest, or
                                             an offset of the new log
  log truncated below the checkpoint       --restart-at: records the sink applied
    (a broker lost its data)                 are gone from the log; pick where
                                             the new history starts
  records deleted before they were         --restart-at earliest (= the new log
    applied (retention, DeleteRecords)       start): accept the loss, which the
                                             reset's audit row records

--keep-checkpoint is refused for a log that changed (it would never resume).
A reset is a compare-and-set: without --yes it only prints the diagnosis,
what it would change and an expect token per partition; run it again with
--yes --expect P=TOKEN,... (or confirm interactively at a terminal), and it
proceeds only if each fence is still the one you saw. It is refused when
the group and the log show no reason for it (a healthy fence: resetting it
would only stop its owner) unless --force. Each reset clears the holder,
requires the next claim to prove its membership to the broker (so a member
of the group's previous incarnation cannot come back through it), and is
recorded in the sink's history with --reason, the diagnosis, the old and
the new state. The output says whether a running worker picks the reset up
by itself (it re-claims blocked partitions every reclaim interval, 10 s by
default) or whether the partition waits for a worker to be assigned it.
` + ConnHelp,
		Example: `  # Diagnose, and show what would change (nothing is changed):
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --all \
      --restart-at earliest --reason "topic recreated by mistake (INC-123)"

  # Do it, with the expect tokens the dry run printed:
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --all \
      --restart-at earliest --reason "topic recreated by mistake (INC-123)" --expect 0=3f9a1c2e,1=77d0b4aa --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFencesReset(cmd, f) },
	}
	f.addCommon(cmd)
	f.addScope(cmd, "partition to reset; -1 resets every partition (as --all)")
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "all", false, "reset every partition of the group and topic that the sink knows")
	fl.BoolVar(&f.keep, "keep-checkpoint", false, "keep each checkpoint (the epochs went backwards; the log is intact)")
	fl.StringVar(&f.restartAt, "restart-at", "", "restart on the log as it is now: earliest, latest or an offset (the log changed)")
	fl.StringSliceVar(&f.expect, "expect", nil, "the expect tokens of the dry run: P=TOKEN per partition (a bare TOKEN for one partition)")
	fl.BoolVar(&f.force, "force", false, "reset although the group and the log show no reason (the owner is fenced until it claims again)")
	fl.StringVar(&f.reason, "reason", "", "why; recorded in the sink's history with the diagnosis (required)")
	fl.BoolVar(&f.yes, "yes", false, "really reset; without it nothing is changed")
	fl.StringSliceVar(&f.brokers, "brokers", defaultBrokers, "seed brokers, comma-separated (the diagnosis reads the log and the group)")
	AddConnFlags(fl, &f.conn)
	return cmd
}

// resetPlan is one scope's diagnosis and what the reset does to it, as
// the dry run prints it (and --json).
type resetPlan struct {
	Scope       string          `json:"scope"`
	Partition   int32           `json:"partition"`
	Fence       fenceJSON       `json:"fence"`
	LogTopicID  string          `json:"log_topic_id"`
	TopicExists bool            `json:"topic_exists"`
	LogStart    int64           `json:"log_start"`
	LogEnd      int64           `json:"log_end"`
	Committed   int64           `json:"committed"`
	Owner       string          `json:"owner"`
	Members     int             `json:"members"`
	Problems    []statusProblem `json:"problems"`
	// Checkpoint is the checkpoint after the reset (-1 if the request
	// cannot be met; Refusal says why).
	Checkpoint int64  `json:"checkpoint"`
	Refusal    string `json:"refusal,omitempty"`
	Resumes    bool   `json:"resumes"`
	Expect     string `json:"expect"`
	Done       bool   `json:"done"`
}

func runFencesReset(cmd *cobra.Command, f fencesFlags) error {
	if err := checkScope(cmd, f, true); err != nil {
		return err
	}
	if f.all && cmd.Flags().Changed("partition") && f.partition != -1 {
		return fmt.Errorf("--all resets every partition: do not combine it with --partition %d", f.partition)
	}
	all := f.all || f.partition == -1
	if strings.TrimSpace(f.reason) == "" {
		return errors.New("--reason is required: say why the fence is reset (it is recorded in the sink's history)")
	}
	var cp admin.Checkpoint
	switch {
	case f.keep && f.restartAt != "":
		return errors.New("--keep-checkpoint and --restart-at exclude each other: keep the checkpoint (epochs went backwards) or restart on the log as it is (the log changed)")
	case f.keep:
		cp.Keep = true
	case f.restartAt != "":
		var err error
		if cp, err = admin.ParseCheckpoint(f.restartAt); err != nil {
			return fmt.Errorf("--restart-at %q: want earliest, latest or an offset", f.restartAt)
		}
	default:
		return errors.New("say what happens to the checkpoint: --keep-checkpoint (the epochs went backwards, the log is intact) or --restart-at earliest|latest|OFFSET (the log changed); the dry run's diagnosis says which")
	}
	expect, err := parseExpect(f.expect)
	if err != nil {
		return err
	}
	c, err := ResolveConn(cmd, f.conn, f.brokers)
	if err != nil {
		return err
	}
	ctx, s, spec, done, err := openFenceSink(cmd, f)
	if err != nil {
		return err
	}
	defer done()
	known, err := s.Fences(ctx)
	if err != nil {
		return fmt.Errorf("reading fences: %w", err)
	}
	if !slices.ContainsFunc(filterFences(known, f.group, f.topic), func(fe sink.Fence) bool { return all || fe.Scope.Partition == f.partition }) {
		what := fmt.Sprintf("%s/%s/%d", f.group, f.topic, f.partition)
		if all {
			what = fmt.Sprintf("any partition of %s/%s", f.group, f.topic)
		}
		return fmt.Errorf("%w: the sink %s has no fence for %s (nothing changed)", sink.ErrNotFound, spec, what)
	}
	gctx, stop := c.guard(ctx)
	defer stop()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.DialTimeout(min(f.timeout/2, 10*time.Second))}, c.opts...)...)
	if err != nil {
		return fmt.Errorf("--brokers: %w", err)
	}
	defer cl.Close()

	preq := admin.PlanRequest{Group: f.group, Topic: f.topic, Checkpoint: cp, Force: f.force}
	if !all {
		preq.Partitions = []int32{f.partition}
	}
	targets, err := admin.Plan(gctx, cl, s, preq)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", brokerError(ctx, c.explain(err), c.brokers, f.topic, f.timeout))
	}
	if len(targets) == 0 {
		return fmt.Errorf("%w: the fences of %s/%s changed while they were read (nothing changed)", sink.ErrNotFound, f.group, f.topic)
	}
	if len(expect) == 1 && expect[-1] != "" {
		if len(targets) != 1 {
			return fmt.Errorf("--expect %s names no partition, and %d fences are to be reset: give P=TOKEN for each", expect[-1], len(targets))
		}
		expect[targets[0].Report.Fence.Scope.Partition] = expect[-1]
		delete(expect, -1)
	}
	plans := make([]resetPlan, len(targets))
	for i, t := range targets {
		plans[i] = toResetPlan(t, cp)
	}

	out := &errWriter{w: cmd.OutOrStdout()}
	if !f.yes {
		if f.asJSON {
			if err := writeJSONErr(out, plans); err != nil {
				return err
			}
		} else {
			printPlans(out, plans, f.force)
		}
		if out.err != nil {
			return out.err
		}
		var toks, refused []string
		for _, p := range plans {
			toks = append(toks, fmt.Sprintf("%d=%s", p.Partition, p.Expect))
			if p.Refusal != "" {
				refused = append(refused, strconv.Itoa(int(p.Partition)))
			}
		}
		if len(refused) > 0 { // --yes would be refused too: say what to change instead
			return fmt.Errorf("the reset of partition %s would be refused, so --yes would fail too: change the command as the refusal says (nothing changed)", strings.Join(refused, ", "))
		}
		if !f.asJSON {
			fmt.Fprintf(out, "\nto reset, run the same command with --yes --expect %s\n", strings.Join(toks, ","))
		}
		return fmt.Errorf("refusing to reset %s without --yes (nothing changed)", count(len(targets), "fence"))
	}
	if len(expect) == 0 {
		in := cmd.InOrStdin()
		if f, ok := in.(*os.File); !ok || !isTerminal(f) {
			return fmt.Errorf("--yes needs --expect (the tokens of the dry run: run it without --yes), or a terminal to confirm at (nothing changed)")
		}
		printPlans(out, plans, f.force)
		if !confirm(in, cmd.ErrOrStderr(), len(plans)) {
			return errors.New("not confirmed (nothing changed)")
		}
		for _, p := range plans {
			expect[p.Partition] = p.Expect
		}
	}
	for _, p := range plans {
		if _, ok := expect[p.Partition]; !ok {
			return fmt.Errorf("--expect has no token for partition %d (each partition reset needs its own; nothing changed)", p.Partition)
		}
	}

	guard := make(map[int32]string, len(plans))
	for _, p := range plans {
		guard[p.Partition] = expect[p.Partition]
	}
	results, err := admin.ResetPartitions(gctx, cl, s, admin.PartitionsRequest{Group: f.group, Topic: f.topic, Expect: guard, Checkpoint: cp, Reason: f.reason, Force: f.force})
	if err != nil {
		return resetError(err)
	}
	for _, res := range results {
		r := res.Report
		scope := r.Fence.Scope
		for i := range plans {
			plans[i].Done = plans[i].Done || plans[i].Partition == scope.Partition
		}
		if f.asJSON {
			continue
		}
		fmt.Fprintf(out, "reset %s\n  before: holder %s, checkpoint %d, topic ID %s\n  after:  holder none, checkpoint %d, topic ID %s; %s\n",
			scope, holderText(res.Before.Holder), res.Before.NextOffset, orDash(res.Before.TopicID), res.After.NextOffset, orDash(res.After.TopicID),
			strings.TrimPrefix(proofText(res.After), "reset: "))
		fmt.Fprintf(out, "  %s\n", resumeText(res.Resumes, r.Owner, r.Members))
	}
	if f.asJSON {
		return writeJSONErr(out, plans)
	}
	return out.err
}

// resetError renders an error of admin.ResetPartitions with each
// partition's hint in the CLI's flags.
func resetError(err error) error {
	var pe *admin.PartitionsError
	if !errors.As(err, &pe) {
		return err
	}
	msgs := make([]string, len(pe.Partitions))
	for i, p := range pe.Partitions {
		e := p.Err
		switch {
		case errors.Is(e, admin.ErrMoved):
			e = fmt.Errorf("%w; run the dry run again", e)
		case errors.Is(e, admin.ErrNoCause):
			e = fmt.Errorf("%w; --force resets anyway", e)
		case p.Refused == admin.RefusedKeepOnChangedLog:
			e = fmt.Errorf("%w; use --restart-at earliest|latest|OFFSET", e)
		case p.Refused == admin.RefusedOffsetOutsideLog:
			e = fmt.Errorf("%w; give --restart-at an offset of the log, or earliest or latest", e)
		}
		msgs[i] = e.Error()
	}
	tail := "nothing changed"
	if len(pe.Done) > 0 {
		tail = fmt.Sprintf("partitions %v were reset before it", pe.Done)
	}
	return &renderedError{msg: strings.Join(msgs, "; ") + " (" + tail + ")", err: err}
}

// renderedError is err said in the CLI's words: msg, still matching err.
type renderedError struct {
	msg string
	err error
}

func (e *renderedError) Error() string { return e.msg }
func (e *renderedError) Unwrap() error { return e.err }

// toResetPlan renders t, a plan of a reset with cp, as the dry run prints
// it (and --json), with the refusals in the CLI's words (its flags).
func toResetPlan(t admin.ResetPlan, cp admin.Checkpoint) resetPlan {
	r := t.Report
	p := resetPlan{Scope: r.Fence.Scope.String(), Partition: r.Fence.Scope.Partition, Fence: toFenceJSON(r.Fence),
		LogTopicID: r.Log.TopicID, TopicExists: r.TopicExists, LogStart: r.Log.LogStart, LogEnd: r.Log.LogEnd,
		Committed: r.Committed, Owner: r.Owner, Members: r.Members, Problems: []statusProblem{},
		Checkpoint: t.Checkpoint, Resumes: t.Resumes, Expect: t.Expect}
	for _, pr := range r.Problems {
		p.Problems = append(p.Problems, statusProblem{Kind: string(pr.Kind), Detail: pr.Detail})
	}
	switch t.Refused {
	case "":
	case admin.RefusedNoCause:
		p.Refusal = "the group and the log show no reason to reset this fence (--force resets it anyway; its owner is fenced until it claims again)"
	case admin.RefusedKeepOnChangedLog:
		p.Refusal = "the log changed under the checkpoint: keeping it would never resume; use --restart-at"
	case admin.RefusedNoLog:
		p.Refusal = "the brokers show no log for the topic (does it exist?); a restart needs one"
	case admin.RefusedOffsetOutsideLog:
		n, _ := strconv.ParseInt(cp.RestartAt, 10, 64)
		p.Refusal = fmt.Sprintf("offset %d is not in the log [%d, %d]", n, r.Log.LogStart, r.Log.LogEnd)
	default:
		p.Refusal = t.Err.Error()
	}
	return p
}

// printPlans prints the dry run: each scope's diagnosis and what the
// reset would do.
func printPlans(w io.Writer, plans []resetPlan, force bool) {
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", p.Scope)
		holder := "none (reset)"
		if p.Fence.HolderEpoch != nil {
			holder = fmt.Sprintf("epoch %d member %s", *p.Fence.HolderEpoch, p.Fence.HolderMember)
		}
		fmt.Fprintf(w, "  fence:    holder %s, checkpoint %d, topic ID %s\n", holder, p.Fence.NextOffset, orDash(p.Fence.TopicID))
		switch {
		case !p.TopicExists:
			fmt.Fprintln(w, "  log:      the topic does not exist on the brokers")
		default:
			fmt.Fprintf(w, "  log:      topic ID %s, offsets %d to %d\n", orDash(p.LogTopicID), p.LogStart, p.LogEnd)
		}
		owner, committed := "nobody", "nothing"
		if p.Owner != "" {
			owner = p.Owner
		}
		if p.Committed >= 0 {
			committed = strconv.FormatInt(p.Committed, 10)
		}
		fmt.Fprintf(w, "  group:    %s; the partition is assigned to %s; committed offset %s\n", count(p.Members, "member"), owner, committed)
		if len(p.Problems) == 0 {
			fmt.Fprintln(w, "  problems: none")
		}
		for _, pr := range p.Problems {
			fmt.Fprintf(w, "  problem:  %s: %s\n", strings.ReplaceAll(pr.Kind, "_", " "), oneLine(pr.Detail))
		}
		if p.Refusal != "" {
			fmt.Fprintf(w, "  reset:    refused: %s\n", p.Refusal)
			continue
		}
		forced := ""
		if len(p.Problems) == 0 && force {
			forced = " (forced)"
		}
		fmt.Fprintf(w, "  reset:    holder -> none%s; checkpoint %d -> %d; the next claim must prove its membership\n", forced, p.Fence.NextOffset, p.Checkpoint)
		fmt.Fprintf(w, "  then:     %s\n", resumeText(p.Resumes, p.Owner, p.Members))
		fmt.Fprintf(w, "  expect:   %d=%s\n", p.Partition, p.Expect)
	}
}

func resumeText(resumes bool, owner string, members int) string {
	switch {
	case resumes:
		return fmt.Sprintf("the running worker that is assigned the partition (member %s) claims it again by itself, within its reclaim interval (10 s by default)", owner)
	case members > 0:
		return fmt.Sprintf("the group has %s but none is assigned the partition now (a rebalance in progress?): the member that is assigned it claims it then", count(members, "member"))
	}
	return "no member is assigned the partition now: it resumes when a worker of the group is assigned it"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// parseExpect reads --expect: P=TOKEN entries, or one bare TOKEN (key -1).
func parseExpect(vals []string) (map[int32]string, error) {
	out := make(map[int32]string, len(vals))
	for _, v := range vals {
		p, tok, ok := strings.Cut(v, "=")
		if !ok {
			if len(vals) != 1 {
				return nil, fmt.Errorf("--expect %q: give P=TOKEN for each partition", v)
			}
			out[-1] = v
			continue
		}
		n, err := strconv.ParseInt(p, 10, 32)
		if err != nil || n < 0 || tok == "" {
			return nil, fmt.Errorf("--expect %q: want PARTITION=TOKEN", v)
		}
		if _, dup := out[int32(n)]; dup {
			return nil, fmt.Errorf("--expect names partition %d twice", n)
		}
		out[int32(n)] = tok
	}
	return out, nil
}

// confirm asks the operator, on a terminal, to type "reset N".
func confirm(in io.Reader, out io.Writer, n int) bool {
	want := fmt.Sprintf("reset %d", n)
	fmt.Fprintf(out, "\ntype %q to reset %s as shown above: ", want, count(n, "fence"))
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	return strings.TrimSpace(line) == want
}

// oneLine collapses whitespace, so a value cannot break a table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// spansText shows done spans as "from-to,from-to"; "" for none.
func spansText(spans []sink.Span) string {
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// storeSpecHelp describes the accepted --store values.
const storeSpecHelp = `sqlstore:sqlite:PATH, sqlstore:postgres://USER[:PASSWORD]@HOST[:PORT]/DB or redisstore:redis://HOST[:PORT][/DB]`

// storeSpec is a parsed --store value: a fencehttp store's kind and the
// database it lives in, parsed as a --sink value is.
type storeSpec struct {
	kind string // "sqlstore" | "redisstore"
	db   sinkSpec
}

// String describes the store for messages, without secrets.
func (s storeSpec) String() string { return s.kind + ":" + s.db.String() }

// parseStoreSpec parses --store. The errors name the flag and never repeat
// a password.
func parseStoreSpec(v string) (storeSpec, error) {
	kind, rest, _ := strings.Cut(strings.TrimSpace(v), ":")
	var spec storeSpec
	switch kind {
	case "sqlstore", "redisstore":
		spec.kind = kind
	default:
		return storeSpec{}, fmt.Errorf("--store: want %s (the kind of the resource's token store, then its database)", storeSpecHelp)
	}
	db, err := parseSinkSpec(rest)
	if err != nil {
		return storeSpec{}, errors.New(strings.Replace(err.Error(), "--sink", "--store "+kind+":", 1))
	}
	switch {
	case kind == "sqlstore" && db.kind != "sqlite" && db.kind != "postgres":
		return storeSpec{}, fmt.Errorf("--store: sqlstore lives in SQLite or PostgreSQL: want sqlstore:sqlite:PATH or sqlstore:postgres://…")
	case kind == "redisstore" && db.kind != "redis":
		return storeSpec{}, fmt.Errorf("--store: redisstore lives in Redis: want redisstore:redis://HOST[:PORT][/DB]")
	case db.prefix != "":
		return storeSpec{}, fmt.Errorf("--store: give the store's key prefix with --store-prefix, not ?prefix=")
	}
	spec.db = db
	return spec, nil
}

// openStore opens the resource's store that spec names, creating
// nothing: an SQLite file must exist and hold the store's tables.
func openStore(ctx context.Context, spec storeSpec, prefix string) (fencehttp.ScopeResetter, func(), error) {
	switch spec.db.kind {
	case "sqlite", "postgres":
		driver, dsn := "pgx", spec.db.dsn
		dialect := sqlstore.PostgreSQL
		if spec.db.kind == "sqlite" {
			if fi, err := os.Stat(spec.db.path); err != nil || fi.IsDir() {
				what := "not a file"
				if errors.Is(err, fs.ErrNotExist) {
					what = "no such file (the service creates its store on first use)"
				} else if err != nil {
					what = err.Error()
				}
				return nil, nil, fmt.Errorf("--store %s: %s", spec, what)
			}
			driver, dsn, dialect = "sqlite", sqlstore.SQLiteDSN(spec.db.path), sqlstore.SQLite
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("--store %s: %w", spec, err)
		}
		s, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: dialect, Prefix: prefix, NoCreate: true})
		if err != nil {
			db.Close()
			switch {
			case errors.Is(err, sqlstore.ErrConfig):
				return nil, nil, fmt.Errorf("--store-prefix %q: a letter, then letters, digits and underscores", prefix)
			case errors.Is(err, sqlstore.ErrSchema):
				return nil, nil, fmt.Errorf("--store %s: no token store with --store-prefix %q there, or one of an older version (start the service once with this version): %w", spec, orDefault(prefix, "fencehttp"), err)
			}
			return nil, nil, fmt.Errorf("--store %s: %w", spec, err)
		}
		return s, func() { db.Close() }, nil
	case "redis":
		opt, err := goredis.ParseURL(spec.db.dsn)
		if err != nil {
			return nil, nil, fmt.Errorf("--store: not a valid Redis URL")
		}
		opt.MaxRetries = -1
		rdb := goredis.NewClient(opt)
		if err := rdb.Ping(ctx).Err(); err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("--store %s: %s", spec, redactURL(err.Error(), spec.db.dsn))
		}
		s, err := redisstore.New(redisstore.Config{Client: rdb, Prefix: prefix})
		if err != nil {
			rdb.Close()
			return nil, nil, fmt.Errorf("--store %s: %w", spec, err)
		}
		return s, func() { rdb.Close() }, nil
	}
	return nil, nil, fmt.Errorf("--store: want %s", storeSpecHelp)
}

// redactURL removes the password of the URL raw from msg.
func redactURL(msg, raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return redactRedis(msg, u)
	}
	return msg
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func newFencesResetResourceCmd() *cobra.Command {
	var f fencesFlags
	var store, storePrefix string
	cmd := &cobra.Command{
		Use:   "reset-resource",
		Short: "Reset a fenced resource's token store for a scope that refuses the sink's holder",
		Long: `reset-resource is the way out when a service the handlers call through
fencehttp (a Guard over sqlstore or redisstore) refuses every call with 409
after the consumer group was recreated (or the brokers lost its state): the
worker's sink was reset or taken over, but the service's token store still
holds the previous incarnation's higher epoch, and the worker keeps the
partition blocked ("a resource the handler called refused this tenure's
token"), claiming it again every reclaim interval.

It reads the store's token and the sink's holder and history, and resets the
store's scope to the sink's holder, pinned below a floor: the highest epoch
of the store, of its earlier resets and of the sink's history up to its last
reset or takeover. While pinned, the store admits the holder itself and
epochs above the floor only, so a member of the previous incarnation cannot
come back through the reset; the pin lifts by itself once a token above the
floor is stored. A rebalance of the new incarnation to another member at an
epoch still at or below the floor is refused too: run this again then.

It is refused when the sink has no holder (wait for a worker's claim), when
the store already admits the holder (nothing to do), and when the sink's
history has no reset or takeover (nothing tells the previous incarnation
apart: reset the sink's fence first with fences reset). Without --yes it
only prints what it would change and an expect token per partition; run it
again with --yes --expect P=TOKEN,...: it proceeds only if the store, the
holder and the floor are still the ones you saw. Each reset is recorded in
the store (sqlstore: the <prefix>_resets table; redisstore: the
<prefix>:resets:<scope> list) with --reason. The worker resumes by itself
within its reclaim interval (10 s by default).`,
		Example: `  # What would change (nothing is changed):
  workrouter fences reset-resource --store sqlstore:sqlite:payments.db --sink sqlite:ledger.db \
      --group ledger-workers --topic ledger --all --reason "group recreated (INC-123)"

  # Do it, with the expect tokens the dry run printed:
  workrouter fences reset-resource --store sqlstore:sqlite:payments.db --sink sqlite:ledger.db \
      --group ledger-workers --topic ledger --all --reason "group recreated (INC-123)" --yes --expect 0=3f9a1c2e`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFencesResetResource(cmd, f, store, storePrefix) },
	}
	f.addCommon(cmd)
	f.addScope(cmd, "partition to reset; -1 resets every partition (as --all)")
	fl := cmd.Flags()
	fl.StringVar(&store, "store", "", "the resource's token store: "+storeSpecHelp+" (required)")
	fl.StringVar(&storePrefix, "store-prefix", "", `the store's table prefix (sqlstore) or key prefix (redisstore), as the service configures it (default "fencehttp")`)
	fl.BoolVar(&f.all, "all", false, "every partition of the group and topic that the sink knows")
	fl.StringSliceVar(&f.expect, "expect", nil, "the expect tokens of the dry run: P=TOKEN per partition (a bare TOKEN for one partition)")
	fl.StringVar(&f.reason, "reason", "", "why; recorded in the store's audit of resets (required)")
	fl.BoolVar(&f.yes, "yes", false, "really reset; without it nothing is changed")
	return cmd
}

// resourcePlanJSON is one scope of a resource's reset, as the command
// prints it in JSON.
type resourcePlanJSON struct {
	Scope     string `json:"scope"`
	Partition int32  `json:"partition"`
	// StoreEpoch is null and StoreMember empty for a scope the store
	// never saw; StoreFloor is -1 for a scope never reset.
	StoreEpoch   *int32 `json:"store_epoch"`
	StoreMember  string `json:"store_member"`
	StoreFloor   int32  `json:"store_floor"`
	HolderEpoch  *int32 `json:"holder_epoch"`
	HolderMember string `json:"holder_member"`
	// Floor is the floor the reset pins below (0 if refused).
	Floor   int32  `json:"floor"`
	Refusal string `json:"refusal,omitempty"`
	Expect  string `json:"expect"`
	Done    bool   `json:"done"`
}

func runFencesResetResource(cmd *cobra.Command, f fencesFlags, store, storePrefix string) error {
	if err := checkScope(cmd, f, true); err != nil {
		return err
	}
	if f.all && cmd.Flags().Changed("partition") && f.partition != -1 {
		return fmt.Errorf("--all resets every partition: do not combine it with --partition %d", f.partition)
	}
	all := f.all || f.partition == -1
	if store == "" {
		return fmt.Errorf("--store is required: %s", storeSpecHelp)
	}
	spec, err := parseStoreSpec(store)
	if err != nil {
		return err
	}
	if strings.TrimSpace(f.reason) == "" {
		return errors.New("--reason is required: say why the store's scope is reset (it is recorded in the store)")
	}
	expect, err := parseExpect(f.expect)
	if err != nil {
		return err
	}
	if f.yes && len(expect) == 0 {
		return errors.New("--yes needs --expect (the tokens of the dry run: run it without --yes; nothing changed)")
	}
	f.readOnly = true // the sink is only read
	ctx, s, _, done, err := openFenceSink(cmd, f)
	if err != nil {
		return err
	}
	defer done()
	st, closeStore, err := openStore(ctx, spec, storePrefix)
	if err != nil {
		return err
	}
	defer closeStore()

	req := admin.ResourcePlanRequest{Group: f.group, Topic: f.topic}
	if !all {
		req.Partitions = []int32{f.partition}
	}
	plans, err := admin.PlanResources(ctx, st, s, req)
	if err != nil {
		return fmt.Errorf("%w (nothing changed)", err)
	}
	if len(plans) == 0 {
		return fmt.Errorf("%w: the sink has no fence for any partition of %s/%s (nothing changed)", sink.ErrNotFound, f.group, f.topic)
	}
	var todo []int
	rows := make([]resourcePlanJSON, len(plans))
	for i, p := range plans {
		rows[i] = toResourcePlanJSON(p)
		if p.Refused == "" {
			todo = append(todo, i)
		}
	}
	if len(expect) == 1 && expect[-1] != "" {
		if len(todo) != 1 {
			return fmt.Errorf("--expect %s names no partition, and %d scopes are to be reset: give P=TOKEN for each", expect[-1], len(todo))
		}
		expect[plans[todo[0]].Scope.Partition] = expect[-1]
		delete(expect, -1)
	}
	// A refusal needs the operator's attention, except, over --all, a
	// partition whose store admits its holder already.
	attention := 0
	for _, p := range plans {
		if p.Refused != "" && (!all || p.Refused != admin.ResourceRefusedStoreAdmits) {
			attention++
		}
	}
	out := &errWriter{w: cmd.OutOrStdout()}
	if !f.yes {
		if f.asJSON {
			if err := writeJSONErr(out, rows); err != nil {
				return err
			}
		} else {
			printResourcePlans(out, spec, plans)
			if len(todo) > 0 {
				var toks []string
				for _, i := range todo {
					toks = append(toks, fmt.Sprintf("%d=%s", plans[i].Scope.Partition, plans[i].Expect))
				}
				fmt.Fprintf(out, "\nto reset, run the same command with --yes --expect %s\n", strings.Join(toks, ","))
			}
		}
		if out.err != nil {
			return out.err
		}
		if len(todo) == 0 {
			return fmt.Errorf("nothing to reset: every scope's reset would be refused (see above; nothing changed)")
		}
		return fmt.Errorf("refusing to reset %d scope(s) of the store without --yes (nothing changed)", len(todo))
	}
	for p := range expect {
		if !slices.ContainsFunc(plans, func(pl admin.ResourcePlan) bool { return pl.Scope.Partition == p }) {
			return fmt.Errorf("--expect names partition %d, which is not among the scopes planned (nothing changed)", p)
		}
	}
	for _, i := range todo {
		if _, ok := expect[plans[i].Scope.Partition]; !ok {
			return fmt.Errorf("--expect has no token for partition %d (each partition reset needs its own; nothing changed)", plans[i].Scope.Partition)
		}
	}
	n := 0
	for i, p := range plans {
		tok, ok := expect[p.Scope.Partition]
		if !ok {
			continue // refused in the plan, and not asked for
		}
		res, err := admin.ResetResource(ctx, st, s, admin.ResourceRequest{Scope: p.Scope, Expect: tok, Reason: f.reason})
		if err != nil {
			if errors.Is(err, admin.ErrMoved) {
				err = fmt.Errorf("%w; run the dry run again", err)
			}
			return fmt.Errorf("%w (%d of %d reset before it)", err, n, len(todo))
		}
		n++
		rows[i].Done = true
		if !f.asJSON {
			fmt.Fprintf(out, "reset %s in %s\n  before: %s\n  after:  %s\n  %s\n", p.Scope, spec, res.Before, res.After, resourceResumeText)
		}
	}
	if f.asJSON {
		if err := writeJSONErr(out, rows); err != nil {
			return err
		}
	} else {
		for _, p := range plans {
			if p.Refused != "" {
				fmt.Fprintf(out, "not reset %s: %s\n", p.Scope, resourceRefusalText(p))
			}
		}
	}
	if out.err != nil {
		return out.err
	}
	if attention > 0 {
		return fmt.Errorf("%d scope(s) not reset need attention (see above)", attention)
	}
	return nil
}

const resourceResumeText = "a worker that has the partition blocked by the store's refusal claims it again by itself within its reclaim interval (10 s by default) and resumes"

func toResourcePlanJSON(p admin.ResourcePlan) resourcePlanJSON {
	r := resourcePlanJSON{Scope: p.Scope.String(), Partition: p.Scope.Partition, StoreMember: p.Store.Token.Member, StoreFloor: p.Store.Floor,
		HolderMember: p.Holder.Member, Floor: p.Floor, Expect: p.Expect}
	if p.Refused != "" {
		r.Refusal, r.Floor = resourceRefusalText(p), 0
	}
	if !p.Store.Token.IsZero() {
		e := p.Store.Token.Epoch
		r.StoreEpoch = &e
	}
	if !p.Holder.IsZero() {
		e := p.Holder.Epoch
		r.HolderEpoch = &e
	}
	return r
}

// resourceRefusalText says, in the CLI's words, why p's reset is refused.
func resourceRefusalText(p admin.ResourcePlan) string {
	switch p.Refused {
	case admin.ResourceRefusedNoHolder:
		return "the sink has no holder for the partition (its fence was reset and not claimed since, or it has none): wait until a worker claims it (workrouter status shows it), then run the dry run again"
	case admin.ResourceRefusedStoreAdmits:
		return "the store already admits the sink's holder: nothing to reset"
	case admin.ResourceRefusedNoSinkReset:
		return "the sink's history of the partition has no reset or takeover, so nothing tells the group's previous incarnation apart: reset the sink's fence first (workrouter fences reset), or the store is right and the holder is stale"
	}
	return p.Err.Error()
}

// printResourcePlans prints the dry run of reset-resource.
func printResourcePlans(w io.Writer, spec storeSpec, plans []admin.ResourcePlan) {
	for i, p := range plans {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s\n", p.Scope)
		fmt.Fprintf(w, "  store:    %s: %s\n", spec, p.Store)
		fmt.Fprintf(w, "  sink:     holder %s", holderText(p.Holder))
		if p.LastReset.Seq != 0 {
			fmt.Fprintf(w, "; last reset seq %d (%s), highest epoch up to it %d", p.LastReset.Seq, oneLine(p.LastReset.Reason), p.HistoryFloor)
		}
		fmt.Fprintln(w)
		if p.Refused != "" {
			fmt.Fprintf(w, "  reset:    refused: %s\n", resourceRefusalText(p))
			continue
		}
		fmt.Fprintf(w, "  reset:    store token -> epoch %d member %s, pinned below floor %d: the store admits that token and epochs above %d only, until one above %d is stored\n",
			p.Holder.Epoch, p.Holder.Member, p.Floor, p.Floor, p.Floor)
		fmt.Fprintf(w, "  then:     %s\n", resourceResumeText)
		fmt.Fprintf(w, "  expect:   %d=%s\n", p.Scope.Partition, p.Expect)
	}
}
