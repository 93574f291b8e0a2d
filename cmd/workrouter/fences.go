package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

func newFencesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fences",
		Short: "List, inspect and (audited) reset the fences stored in a sink",
		Long: `fences reads and administers the fencing state a sink stores per scope
(group, topic, partition): the holder token {epoch, member} of the current
tenure and NextOffset, the first Kafka offset not yet applied.

  fences list     every scope's holder and NextOffset
  fences history  the accepted claims and the admin resets of one scope
  fences reset    clear a scope's holder so that the next claim at any epoch
                  succeeds (after a group was deleted and recreated, or a
                  broker lost its state, every claim is fenced because the
                  epochs went backwards). NextOffset is kept, so nothing is
                  applied twice. Each reset is recorded with its reason in
                  the sink's history. It needs --yes; without it, it only
                  shows what it would change.`,
		Example: `  workrouter fences list --sink sqlite:ledger.db
  workrouter fences history --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3 \
      --reason "group recreated after broker data loss (INC-123)" --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("fences needs a subcommand: list, history or reset (see workrouter fences --help)")
		},
	}
	cmd.AddCommand(newFencesListCmd(), newFencesHistoryCmd(), newFencesResetCmd())
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
	// readOnly opens the sink read-only (list, history): see
	// openAdminReadOnly.
	readOnly bool
}

func (f *fencesFlags) addCommon(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.sink, "sink", "", "the sink: "+sinkSpecHelp+" (required)")
	fl.BoolVar(&f.asJSON, "json", false, "print JSON instead of a table")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the sink")
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
}

func toFenceJSON(f sink.Fence) fenceJSON {
	out := fenceJSON{Group: f.Scope.Group, Topic: f.Scope.Topic, Partition: f.Scope.Partition,
		HolderMember: f.Holder.Member, NextOffset: f.NextOffset}
	if !f.Holder.IsZero() {
		e := f.Holder.Epoch
		out.HolderEpoch = &e
	}
	return out
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
	return cmd
}

func printFences(w io.Writer, fs []sink.Fence) error {
	ew := &errWriter{w: w}
	if len(fs) == 0 {
		fmt.Fprintln(ew, "no fences")
		return ew.err
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTOPIC\tPARTITION\tHOLDER EPOCH\tHOLDER MEMBER\tNEXT OFFSET")
	for _, fe := range fs {
		epoch, member := "none", "none"
		if !fe.Holder.IsZero() {
			epoch, member = strconv.Itoa(int(fe.Holder.Epoch)), fe.Holder.Member
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\n", fe.Scope.Group, fe.Scope.Topic, fe.Scope.Partition, epoch, member, fe.NextOffset)
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
					Seq        int64     `json:"seq"`
					Kind       string    `json:"kind"`
					Epoch      *int32    `json:"epoch"`
					Member     string    `json:"member"`
					NextOffset int64     `json:"next_offset"`
					Reason     string    `json:"reason,omitempty"`
					At         time.Time `json:"at"`
				}
				rows := make([]row, len(hs))
				for i, h := range hs {
					rows[i] = row{Seq: h.Seq, Kind: h.Kind, Member: h.Token.Member, NextOffset: h.NextOffset, Reason: h.Reason, At: h.At}
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
			fmt.Fprintln(tw, "SEQ\tKIND\tEPOCH\tMEMBER\tNEXT OFFSET\tAT\tREASON")
			for _, h := range hs {
				epoch, member := "-", "-"
				if !h.Token.IsZero() {
					epoch, member = strconv.Itoa(int(h.Token.Epoch)), h.Token.Member
				}
				reason := h.Reason
				if reason == "" {
					reason = "-"
				}
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", h.Seq, h.Kind, epoch, member, h.NextOffset,
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
		Short: "Clear a scope's holder (audited) so that the next claim at any epoch succeeds",
		Long: `reset lifts the fence of one partition (or, with --all or --partition -1, of
every partition of the group and topic the sink knows): it clears the stored
holder so that the next claim succeeds whatever its epoch, and keeps
NextOffset, so nothing is applied twice. Use it only when the group's epochs
went backwards (the group was deleted and recreated, or a broker lost its
state) and every claim is fenced; make sure no old worker of the group is
still running.

Each reset is recorded in the sink's history with --reason (required).
Without --yes nothing is changed: it prints what it would change and exits
non-zero. It prints each scope's fence before and after.`,
		Example: `  # Show what would change:
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --partition 3 --reason "group recreated"

  # Do it, for every partition of the topic:
  workrouter fences reset --sink sqlite:ledger.db --group ledger-workers --topic ledger --all \
      --reason "broker lost its data dir; group recreated (INC-123)" --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFencesReset(cmd, f) },
	}
	f.addCommon(cmd)
	f.addScope(cmd, "partition to reset; -1 resets every partition (as --all)")
	fl := cmd.Flags()
	fl.BoolVar(&f.all, "all", false, "reset every partition of the group and topic that the sink knows")
	fl.StringVar(&f.reason, "reason", "", "why the fence is lifted; recorded in the sink's history (required)")
	fl.BoolVar(&f.yes, "yes", false, "really reset; without it nothing is changed")
	return cmd
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
		return errors.New("--reason is required: say why the fence is lifted (it is recorded in the sink's history)")
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
	var targets []sink.Fence
	for _, fe := range filterFences(known, f.group, f.topic) {
		if all || fe.Scope.Partition == f.partition {
			targets = append(targets, fe)
		}
	}
	if len(targets) == 0 {
		what := fmt.Sprintf("%s/%s/%d", f.group, f.topic, f.partition)
		if all {
			what = fmt.Sprintf("any partition of %s/%s", f.group, f.topic)
		}
		return fmt.Errorf("%w: the sink %s has no fence for %s (nothing changed)", sink.ErrNotFound, spec, what)
	}

	out := &errWriter{w: cmd.OutOrStdout()}
	if !f.yes {
		for _, t := range targets {
			fmt.Fprintf(out, "would reset %s: holder %s -> none; next offset %d kept\n", t.Scope, holderText(t.Holder), t.NextOffset)
		}
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("refusing to reset %d fence(s) without --yes (nothing changed)", len(targets))
	}

	for i, t := range targets {
		before, err := s.ResetFence(ctx, sink.ResetRequest{Scope: t.Scope, Expect: t, Reason: f.reason})
		if err != nil {
			return fmt.Errorf("resetting %s: %w (%d of %d reset before it)", t.Scope, err, i, len(targets))
		}
		after := readFence(ctx, s, t.Scope)
		fmt.Fprintf(out, "reset %s\n  before: holder %s, next offset %d\n  after:  %s\n",
			t.Scope, holderText(before.Holder), before.NextOffset, after)
	}
	if out.err != nil {
		return out.err
	}
	return nil
}

// readFence re-reads scope's fence for the "after" line.
func readFence(ctx context.Context, s adminSink, scope epochs.Scope) string {
	fs, err := s.Fences(ctx)
	if err != nil {
		return "could not be read back: " + oneLine(err.Error())
	}
	for _, f := range fs {
		if f.Scope == scope {
			return fmt.Sprintf("holder %s, next offset %d", holderText(f.Holder), f.NextOffset)
		}
	}
	return "not found when read back"
}

// oneLine collapses whitespace, so a value cannot break a table row.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
