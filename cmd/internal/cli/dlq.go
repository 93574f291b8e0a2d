package cli

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/workrouter/workrouter/admin"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/postgres"
	"github.com/workrouter/workrouter/sink/sqlite"
)

// errNoDeadLetters is matched by the error for a sink that cannot store
// dead letters.
var errNoDeadLetters = errors.New("the sink does not store dead letters")

func newDLQCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, inspect, redrive and drop the dead letters stored in a sink",
		Long: `dlq reads and resolves the dead letters a sink stores: the poison records a
worker skipped — records that are not workrouter commands, commands of a type
without a handler, commands whose handler refused them for good or kept
failing — each stored, with why, in the same fenced transaction that moved
the partition's checkpoint past it.

  dlq list     the dead letters, with filters
  dlq show     one dead letter whole: where it was, its headers and payload,
               why it was skipped, and its audit rows
  dlq redrive  produce it again through the router as a NEW command (same
               key, so same partition; same type, payload, headers and
               command ID; headers workrouter-redrive-of: ID and
               workrouter-redrive-for: GROUP) once the cause is fixed: only
               the dead letter's group applies it, the topic's other groups
               skip it; a dead letter is redriven at most once
  dlq drop     mark it handled: nothing more will be done with it

A dead letter moves open → redriving → redriven, or open → dropped; each move
is recorded in its audit rows with --reason. Nothing is ever deleted.
redrive and drop need --yes; without it they only say what they would do.`,
		Example: `  workrouter dlq list --sink sqlite:ledger.db --state open
  workrouter dlq show 7 --sink sqlite:ledger.db
  workrouter dlq redrive 7 --sink sqlite:ledger.db --reason "handler fixed in v1.4.2 (INC-88)" --yes
  workrouter dlq drop 8 --sink sqlite:ledger.db --reason "test record from a load test" --yes`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return errors.New("dlq needs a subcommand: list, show, redrive or drop (see workrouter dlq --help)")
		},
	}
	cmd.AddCommand(newDLQListCmd(), newDLQShowCmd(), newDLQRedriveCmd(), newDLQDropCmd())
	return cmd
}

// dlqFlags holds the flags of the dlq subcommands.
type dlqFlags struct {
	sink    string
	timeout time.Duration
	asJSON  bool

	// list
	group     string
	topic     string
	partition int32
	typ       string
	reason    string
	since     string
	states    []string
	limit     int

	// show
	raw bool

	// redrive and drop
	newID       bool   // redrive only
	all         bool   // redrive by filter: every open dead letter
	dlReason    string // redrive by filter: --dead-letter-reason
	yes         bool
	brokers     []string
	conn        ConnFlags
	partitioner string
}

func (f *dlqFlags) addCommon(cmd *cobra.Command, withJSON bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.sink, "sink", "", "the sink: "+sinkSpecHelp+" (required)")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the sink (and, for redrive, the brokers)")
	if withJSON {
		fl.BoolVar(&f.asJSON, "json", false, "print JSON instead of text")
	}
}

// deadLetterStoreOf finds the dead-letter capability of an admin sink.
func deadLetterStoreOf(s adminSink) (dlq.Store, bool) {
	switch s := s.(type) {
	case *sqlite.Sink:
		return sink.As[dlq.Store](sink.Sink[*sqlite.Tx](s))
	case *postgres.Sink:
		return sink.As[dlq.Store](sink.Sink[pgx.Tx](s))
	}
	ds, ok := s.(dlq.Store)
	return ds, ok
}

// openDLQ validates --sink and --timeout and opens the sink's dead-letter
// store, read-only (see openAdminReadOnly) for list and show; call done
// when finished.
func openDLQ(cmd *cobra.Command, f dlqFlags, readOnly bool) (ctx context.Context, ds dlq.Store, spec sinkSpec, done func(), err error) {
	if f.sink == "" {
		return nil, nil, sinkSpec{}, nil, fmt.Errorf("--sink is required: %s", sinkSpecHelp)
	}
	if f.timeout <= 0 {
		return nil, nil, sinkSpec{}, nil, fmt.Errorf("--timeout must be positive, got %s", f.timeout)
	}
	if spec, err = parseSinkSpec(f.sink); err != nil {
		return nil, nil, sinkSpec{}, nil, err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	s, closeSink, err := openAdminSink(ctx, spec, readOnly)
	if err != nil {
		cancel()
		return nil, nil, sinkSpec{}, nil, err
	}
	ds, ok := deadLetterStoreOf(s)
	if !ok {
		closeSink()
		cancel()
		return nil, nil, sinkSpec{}, nil, fmt.Errorf("sink %s: %w (it has no dlq.Store)", spec, errNoDeadLetters)
	}
	return ctx, ds, spec, func() { closeSink(); cancel() }, nil
}

// parseID parses a dead letter ID argument.
func parseID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("dead letter ID %q: want a positive number (see workrouter dlq list)", arg)
	}
	return id, nil
}

// getDeadLetter reads dead letter id (admin.DeadLetter), or fails with an
// error matching sink.ErrNotFound that names the sink.
func getDeadLetter(ctx context.Context, ds dlq.Store, spec sinkSpec, id int64) (dlq.Letter, error) {
	d, err := admin.DeadLetter(ctx, ds, id)
	return d, deadLetterError(err, spec, id)
}

// deadLetterError renders an error of admin's dead-letter functions that
// matches sink.ErrNotFound as the CLI says it, naming the sink; others
// pass unchanged.
func deadLetterError(err error, spec sinkSpec, id int64) error {
	if err != nil && errors.Is(err, sink.ErrNotFound) {
		return fmt.Errorf("dead letter %d does not exist in sink %s: %w", id, spec, sink.ErrNotFound)
	}
	return err
}

// printable reports whether b is valid UTF-8 without control characters
// other than tabs and newlines (when lines is set).
func printable(b []byte, lines bool) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if unicode.IsControl(r) && !(lines && (r == '\n' || r == '\t' || r == '\r')) {
			return false
		}
	}
	return true
}

// bytesText renders a key or header value on one line: its text when
// printable, else 0x and its hex; null bytes as "(null)".
func bytesText(b []byte) string {
	switch {
	case b == nil:
		return "(null)"
	case len(b) == 0:
		return `""`
	case printable(b, false):
		return string(b)
	}
	return "0x" + hex.EncodeToString(b)
}

// clip shortens s to n runes, marking the cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// age renders how long ago t was, compactly.
func age(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// dlqBytes is a key, value or header value in JSON: its text when it is
// valid UTF-8, else its base64; null bytes as both absent.
type dlqBytes struct {
	Text   *string `json:"text,omitempty"`
	Base64 *string `json:"base64,omitempty"`
}

func toDLQBytes(b []byte) *dlqBytes {
	if b == nil {
		return nil
	}
	if utf8.Valid(b) {
		s := string(b)
		return &dlqBytes{Text: &s}
	}
	s := base64.StdEncoding.EncodeToString(b)
	return &dlqBytes{Base64: &s}
}

// dlqHeaderJSON is a record header in JSON.
type dlqHeaderJSON struct {
	Key   string    `json:"key"`
	Value *dlqBytes `json:"value"`
}

// dlqAuditJSON is an audit row in JSON.
type dlqAuditJSON struct {
	Seq    int64     `json:"seq"`
	From   string    `json:"from"`
	To     string    `json:"to"`
	Reason string    `json:"reason"`
	Detail string    `json:"detail,omitempty"`
	At     time.Time `json:"at"`
}

// dlqJSON is a dead letter as the dlq commands print it in JSON. list
// leaves out the payload, the headers and the audit rows.
type dlqJSON struct {
	ID         int64           `json:"id"`
	Group      string          `json:"group"`
	Topic      string          `json:"topic"`
	Partition  int32           `json:"partition"`
	Offset     int64           `json:"offset"`
	TopicID    string          `json:"topic_id,omitempty"`
	Key        *dlqBytes       `json:"key"`
	Type       string          `json:"type"`
	Reason     string          `json:"reason"`
	Error      string          `json:"error"`
	Attempts   int             `json:"attempts"`
	Epoch      int32           `json:"epoch"`
	Member     string          `json:"member"`
	RecordTime time.Time       `json:"record_time"`
	At         time.Time       `json:"at"`
	State      string          `json:"state"`
	Mirrored   bool            `json:"mirrored"`
	Headers    []dlqHeaderJSON `json:"headers,omitempty"`
	Payload    *dlqBytes       `json:"payload,omitempty"`
	Audit      []dlqAuditJSON  `json:"audit,omitempty"`
}

func toDLQJSON(d dlq.Letter) dlqJSON {
	return dlqJSON{ID: d.ID, Group: d.Scope.Group, Topic: d.Scope.Topic, Partition: d.Scope.Partition, Offset: d.Record.Offset,
		TopicID: d.Record.TopicID, Key: toDLQBytes(d.Record.Key), Type: admin.RecordType(d.Record), Reason: d.Record.Reason,
		Error: d.Record.Error, Attempts: d.Record.Attempts, Epoch: d.Token.Epoch, Member: d.Token.Member,
		RecordTime: d.Record.Timestamp, At: d.At, State: string(d.State), Mirrored: d.Mirrored}
}

// parseSince parses --since: a duration before now, or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %q: want a positive duration (how long ago) or an RFC 3339 time", s)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (such as 2h) or an RFC 3339 time (such as 2026-01-02T15:04:05Z)", s)
	}
	return t, nil
}

func newDLQListCmd() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the dead letters of a sink, oldest first",
		Long: `list prints the dead letters of a sink, oldest first, as a table (or
--json): ID, scope (group/topic/partition), offset, key, command type,
reason, attempts, state, age and error. Filters combine; --limit caps the
rows (0: all). list and show open the sink read-only: they create nothing,
and a database without the sink's tables (or a PostgreSQL schema, the
DSN's search_path, that does not exist) is an error that says so.

Reasons: undecodable (not a workrouter command: no key, no or two type
headers), no_handler (no handler for its type), permanent (the handler
refused it for good), handler_error (the handler kept failing until its
retry budget was spent), misrouted (its key maps to another partition than
the one it was on, and the worker ran with --misroute refuse).`,
		Example: `  workrouter dlq list --sink sqlite:ledger.db
  workrouter dlq list --sink sqlite:ledger.db --state open --partition 3 --since 2h
  workrouter dlq list --sink postgres://postgres@127.0.0.1:5432/test --reason permanent --type withdraw --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDLQList(cmd, f) },
	}
	f.addCommon(cmd, true)
	fl := cmd.Flags()
	fl.StringVar(&f.group, "group", "", "only this consumer group")
	fl.StringVar(&f.topic, "topic", "", "only this topic")
	fl.Int32Var(&f.partition, "partition", 0, "only this partition")
	fl.StringVar(&f.typ, "type", "", "only commands of this type (the record's workrouter-type header)")
	fl.StringVar(&f.reason, "reason", "", "only this reason: undecodable, no_handler, permanent, handler_error or misrouted")
	fl.StringVar(&f.since, "since", "", "only dead letters stored since then: a duration ago (2h) or an RFC 3339 time")
	fl.StringSliceVar(&f.states, "state", nil, "only these states: open, redriving, redriven, dropped (comma-separated or repeated)")
	fl.IntVar(&f.limit, "limit", 100, "print at most this many (0: all)")
	notEmpty(fl, "group", "topic", "type", "reason")
	return cmd
}

func runDLQList(cmd *cobra.Command, f dlqFlags) error {
	now := time.Now()
	q := admin.DeadLetterQuery{Group: f.group, Topic: f.topic, Type: f.typ, Reason: f.reason, Limit: f.limit}
	if cmd.Flags().Changed("partition") {
		p := f.partition
		q.Partition = &p
	}
	if f.since != "" {
		var err error
		if q.Since, err = parseSince(f.since, now); err != nil {
			return err
		}
	}
	for _, st := range f.states {
		q.States = append(q.States, dlq.State(st))
	}
	// The flags are checked before the sink is opened.
	if err := q.Validate(); err != nil {
		return queryFlagError(err)
	}
	ctx, ds, _, done, err := openDLQ(cmd, f, true)
	if err != nil {
		return err
	}
	defer done()
	page, err := admin.DeadLetters(ctx, ds, q)
	if err != nil {
		return queryFlagError(err)
	}
	dls := page.DeadLetters
	out := cmd.OutOrStdout()
	if f.asJSON {
		rows := make([]dlqJSON, len(dls))
		for i, d := range dls {
			rows[i] = toDLQJSON(d)
		}
		if err := writeJSONErr(out, rows); err != nil {
			return err
		}
	} else if err := printDeadLetters(out, dls, now); err != nil {
		return err
	}
	if page.More {
		fmt.Fprintf(cmd.ErrOrStderr(), "more dead letters match: showing the first %d (--limit 0 shows all)\n", f.limit)
	}
	return nil
}

// queryFlagError renders an *admin.QueryError with the flag of its field;
// other errors pass unchanged.
func queryFlagError(err error) error {
	var qe *admin.QueryError
	if !errors.As(err, &qe) {
		return err
	}
	switch qe.Field {
	case "Reason":
		return fmt.Errorf("--reason %s: want %s", qe.Value, qe.Want)
	case "States":
		return fmt.Errorf("--state %s: want %s", qe.Value, qe.Want)
	case "Partition":
		return fmt.Errorf("--partition must be %s, got %s", qe.Want, qe.Value)
	case "Limit":
		return fmt.Errorf("--limit must be %s, got %s", qe.Want, qe.Value)
	}
	return err
}

func printDeadLetters(w io.Writer, dls []dlq.Letter, now time.Time) error {
	ew := &errWriter{w: w}
	if len(dls) == 0 {
		fmt.Fprintln(ew, "no dead letters")
		return ew.err
	}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSCOPE\tOFFSET\tKEY\tTYPE\tREASON\tATTEMPTS\tSTATE\tAGE\tERROR")
	for _, d := range dls {
		typ := admin.RecordType(d.Record)
		if typ == "" {
			typ = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.ID, d.Scope, d.Record.Offset,
			clip(oneLine(bytesText(d.Record.Key)), 32), clip(oneLine(typ), 24), d.Record.Reason, d.Record.Attempts,
			d.State, age(now, d.At), clip(oneLine(d.Record.Error), 80))
	}
	tw.Flush()
	return ew.err
}

func newDLQShowCmd() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show one dead letter whole: record, headers, payload, why, and its audit rows",
		Long: `show prints one dead letter: its scope, offset, topic ID and key; its
headers; its payload (as text when it is valid UTF-8, else as a hex dump);
why it was skipped (reason, error, attempts) and by which tenure (token);
when; its state, whether it was mirrored to the DLQ topic, and its audit
rows. --raw writes only the payload's bytes to stdout; --json prints
everything as one JSON object (a payload that is not UTF-8 as base64).`,
		Example: `  workrouter dlq show 7 --sink sqlite:ledger.db
  workrouter dlq show 7 --sink sqlite:ledger.db --raw > payload.bin`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runDLQShow(cmd, f, args[0]) },
	}
	f.addCommon(cmd, true)
	cmd.Flags().BoolVar(&f.raw, "raw", false, "write only the payload's bytes to stdout")
	return cmd
}

func runDLQShow(cmd *cobra.Command, f dlqFlags, arg string) error {
	id, err := parseID(arg)
	if err != nil {
		return err
	}
	if f.raw && f.asJSON {
		return errors.New("--raw and --json exclude each other")
	}
	ctx, ds, spec, done, err := openDLQ(cmd, f, true)
	if err != nil {
		return err
	}
	defer done()
	d, err := getDeadLetter(ctx, ds, spec, id)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.raw {
		_, err := out.Write(d.Record.Value)
		return err
	}
	audit, err := admin.DeadLetterAudit(ctx, ds, id)
	if err != nil {
		return err
	}
	if f.asJSON {
		j := toDLQJSON(d)
		j.Payload = toDLQBytes(d.Record.Value)
		for _, h := range d.Record.Headers {
			j.Headers = append(j.Headers, dlqHeaderJSON{Key: h.Key, Value: toDLQBytes(h.Value)})
		}
		for _, a := range audit {
			j.Audit = append(j.Audit, dlqAuditJSON{Seq: a.Seq, From: string(a.From), To: string(a.To), Reason: a.Reason, Detail: a.Detail, At: a.At})
		}
		return writeJSONErr(out, j)
	}
	return printDeadLetter(out, d, audit, time.Now())
}

func printDeadLetter(w io.Writer, d dlq.Letter, audit []dlq.Action, now time.Time) error {
	ew := &errWriter{w: w}
	typ := admin.RecordType(d.Record)
	if typ == "" {
		typ = "(none)"
	}
	topicID := d.Record.TopicID
	if topicID == "" {
		topicID = "(unknown)"
	}
	mirrored := "no"
	if d.Mirrored {
		mirrored = "yes"
	}
	fmt.Fprintf(ew, "dead letter %d\n", d.ID)
	tw := tabwriter.NewWriter(ew, 0, 0, 1, ' ', 0)
	for _, row := range [][2]string{
		{"scope", d.Scope.String()},
		{"offset", strconv.FormatInt(d.Record.Offset, 10)},
		{"topic id", topicID},
		{"key", bytesText(d.Record.Key)},
		{"type", typ},
		{"reason", d.Record.Reason},
		{"error", oneLine(d.Record.Error)},
		{"attempts", strconv.Itoa(d.Record.Attempts)},
		{"token", fmt.Sprintf("epoch %d, member %s", d.Token.Epoch, d.Token.Member)},
		{"record time", d.Record.Timestamp.UTC().Format(time.RFC3339Nano)},
		{"stored at", fmt.Sprintf("%s (%s ago)", d.At.UTC().Format(time.RFC3339Nano), age(now, d.At))},
		{"state", string(d.State)},
		{"mirrored", mirrored},
	} {
		fmt.Fprintf(tw, "  %s:\t%s\n", row[0], row[1])
	}
	tw.Flush()
	if len(d.Record.Headers) == 0 {
		fmt.Fprintln(ew, "  headers: none")
	} else {
		fmt.Fprintln(ew, "  headers:")
		for _, h := range d.Record.Headers {
			fmt.Fprintf(ew, "    %s: %s\n", oneLine(h.Key), bytesText(h.Value))
		}
	}
	v := d.Record.Value
	switch {
	case v == nil:
		fmt.Fprintln(ew, "  payload: (null)")
	case len(v) == 0:
		fmt.Fprintln(ew, "  payload: (empty)")
	case printable(v, true):
		fmt.Fprintf(ew, "  payload (%d bytes, text):\n", len(v))
		for _, line := range strings.Split(strings.TrimRight(string(v), "\n"), "\n") {
			fmt.Fprintf(ew, "    %s\n", line)
		}
	default:
		fmt.Fprintf(ew, "  payload (%d bytes, not text; --raw writes the bytes):\n", len(v))
		for _, line := range strings.Split(strings.TrimRight(hex.Dump(v), "\n"), "\n") {
			fmt.Fprintf(ew, "    %s\n", line)
		}
	}
	if len(audit) == 0 {
		fmt.Fprintln(ew, "  audit: none")
	} else {
		fmt.Fprintln(ew, "  audit:")
		for _, a := range audit {
			detail := ""
			if a.Detail != "" {
				detail = "; " + oneLine(a.Detail)
			}
			fmt.Fprintf(ew, "    %d  %s  %s -> %s  reason %q%s\n", a.Seq, a.At.UTC().Format(time.RFC3339), a.From, a.To, oneLine(a.Reason), detail)
		}
	}
	return ew.err
}

// addDecisionFlags adds --reason and --yes to redrive and drop: verb is
// the command ("redrive"), done its past participle ("redriven"), and
// unchanged what --yes is needed for ("nothing is changed or sent").
func addDecisionFlags(fl *pflag.FlagSet, f *dlqFlags, verb, done, unchanged string) {
	fl.StringVar(&f.reason, "reason", "", "why it is "+done+"; recorded in its audit rows (required)")
	fl.BoolVar(&f.yes, "yes", false, "really "+verb+"; without it "+unchanged)
}

// decisionArgs reads the dead letter's ID of redrive and drop and checks
// --reason (done as in addDecisionFlags).
func decisionArgs(f dlqFlags, arg, done string) (int64, error) {
	id, err := parseID(arg)
	if err != nil {
		return 0, err
	}
	if strings.TrimSpace(f.reason) == "" {
		return 0, fmt.Errorf("--reason is required: say why the dead letter is %s (it is recorded in its audit rows)", done)
	}
	return id, nil
}

// decisionError renders an error of admin.PlanRedrive, admin.Redrive,
// admin.PlanDrop or admin.Drop (verb "redrive" or "drop") with the CLI's
// hints; unchanged, if not empty, says what was not done ("nothing sent").
func decisionError(err error, spec sinkSpec, id int64, verb, unchanged string) error {
	if unchanged != "" {
		unchanged = " (" + unchanged + ")"
	}
	var (
		no  *admin.NotOpenError
		nac *admin.NotACommandError
		cf  *admin.ChangedFirstError
	)
	switch {
	case errors.Is(err, sink.ErrNotFound):
		return fmt.Errorf("%w%s", deadLetterError(err, spec, id), unchanged)
	case errors.As(err, &no):
		return notOpen(no, verb)
	case errors.As(err, &nac):
		return fmt.Errorf("cannot redrive dead letter %d: its record is not a workrouter command (%s), so it has no command to produce again; "+
			"produce a corrected command yourself and mark this one handled with workrouter dlq drop %d --reason … --yes (nothing changed, nothing sent)",
			id, oneLine(nac.Err.Error()), id)
	case errors.As(err, &cf):
		return fmt.Errorf("cannot %s dead letter %d: another redrive or drop changed it first: %w%s", verb, id, cf.Err, unchanged)
	}
	return fmt.Errorf("%w%s", err, unchanged)
}

// notOpen explains why a dead letter that is not open cannot be redriven
// or dropped.
func notOpen(e *admin.NotOpenError, verb string) error {
	why := ""
	switch e.State {
	case dlq.Redriven:
		why = ": it was redriven already, and a dead letter is redriven at most once"
	case dlq.Dropped:
		why = ": it was dropped"
	case dlq.Redriving:
		why = ": a redrive of it is under way, or was interrupted (see its audit rows: workrouter dlq show " + strconv.FormatInt(e.ID, 10) + ")"
	}
	return fmt.Errorf("cannot %s dead letter %d: %w: it is %s, not open%s (nothing changed, nothing sent)", verb, e.ID, dlq.ErrState, e.State, why)
}

func newDLQRedriveCmd() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "redrive [ID]",
		Short: "Produce dead-lettered commands again, as new commands, once their cause is fixed (audited)",
		Long: `redrive produces the command of an open dead letter again through the
router, as a NEW command on its original topic: the same key (so the same
partition, and the worker that owns it applies it), type, payload, user
headers and command ID (workrouter-id; one is generated if the record had
none), plus the headers workrouter-redrive-of: ID and workrouter-redrive-for:
GROUP, the dead letter's consumer group.

Every consumer group of the topic reads the new command, but only GROUP
applies it: the workers of the topic's other groups, which applied the
original command already, skip it whatever their dedupe window, without
calling a handler or recording its ID (counted in
workrouter_consumer_redrives_skipped_total and reported as a redrive_skipped
event), and GROUP skips it as a duplicate if it applied the command's ID
within its sink's dedupe window (workrouter worker --dedupe-window;
workrouter_consumer_duplicates_skipped_total). The dead letter itself is
never rewritten: it moves open → redriving before the command is produced and
redriving → redriven after, each move an audit row with --reason (the second
names the partition and offset produced). If producing fails, it moves back
to open, with an audit row saying so. A dead letter is redriven at most once;
a record that is not a workrouter command (no key or type) cannot be
redriven (drop it, and produce a corrected command yourself).

The new command is applied after the commands of its key that were already
applied: redriving changes its place in its key's order. Fix the cause first
(deploy the handler, fix the data), or the command is dead-lettered again,
as a new dead letter.

A service that keeps outcomes under the command's idempotency key (a
fencehttp service: the key is the command ID) replays the answer it
recorded to every call with the same ID: a dead letter whose cause is a
recorded refusal (a 4xx) is dead-lettered again by a redrive with its own
ID, however the service was fixed. --new-id produces it with a new command
ID instead, audited as such; the sink then cannot tell it from the original
by ID, so use it only for a command the group never applied (a dead
letter's command was not).

Without an ID it redrives every open dead letter that the filters select
(--group, --topic, --partition, --type, --dead-letter-reason, --since; or
--all for every one), oldest first, one topic at a time, each as above with
its own audit rows. Dead letters whose record is not a command are listed
and left open; one that another redrive or drop changed first is left as it
is and reported. A failure to produce stops it, saying how many were
redriven and which was not. It exits non-zero unless every selected dead
letter was redriven. --yes redrives what the filters select when it runs,
which may be more than its dry run listed.

Without --yes nothing is changed or sent: it prints what it would do and
exits non-zero.`,
		Example: `  # Show what would happen:
  workrouter dlq redrive 7 --sink sqlite:ledger.db --reason "handler fixed in v1.4.2"

  # Every open dead letter of one type and reason, after the fix (dry run, then --yes):
  workrouter dlq redrive --sink sqlite:ledger.db --topic ledger --type withdraw --dead-letter-reason handler_error --reason "INC-88 fixed"

  # Do it:
  workrouter dlq redrive 7 --sink sqlite:ledger.db --brokers 10.0.0.1:9092 --reason "handler fixed in v1.4.2 (INC-88)" --yes`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return runDLQRedriveFiltered(cmd, f)
			}
			if names := redriveFilterFlags(cmd); len(names) > 0 {
				return fmt.Errorf("give a dead letter's ID or filters, not both: %s select dead letters for a redrive without an ID", strings.Join(names, ", "))
			}
			return runDLQRedrive(cmd, f, args[0])
		},
	}
	f.addCommon(cmd, false)
	fl := cmd.Flags()
	fl.StringSliceVar(&f.brokers, "brokers", defaultBrokers, "seed brokers, comma-separated")
	fl.StringVar(&f.partitioner, "partitioner", "murmur2", "how keys map to partitions: murmur2 (Kafka's default) or crc32 (librdkafka's default); as the topic's producers")
	AddConnFlags(fl, &f.conn)
	addDecisionFlags(fl, &f, "redrive", "redriven", "nothing is changed or sent")
	fl.StringVar(&f.group, "group", "", "without an ID: only this consumer group's dead letters")
	fl.StringVar(&f.topic, "topic", "", "without an ID: only this topic's dead letters")
	fl.Int32Var(&f.partition, "partition", 0, "without an ID: only this partition's dead letters")
	fl.StringVar(&f.typ, "type", "", "without an ID: only commands of this type")
	fl.StringVar(&f.dlReason, "dead-letter-reason", "", "without an ID: only dead letters of this reason: undecodable, no_handler, permanent, handler_error or misrouted")
	fl.StringVar(&f.since, "since", "", "without an ID: only dead letters stored since then: a duration ago (2h) or an RFC 3339 time")
	fl.BoolVar(&f.all, "all", false, "without an ID and filters: every open dead letter")
	notEmpty(fl, "group", "topic", "type", "dead-letter-reason")
	fl.BoolVar(&f.newID, "new-id", false, "produce it with a new command ID instead of its own (audited): for a dead letter whose cause a service recorded under the command's idempotency key, such as a fencehttp service's 4xx, which it replays to the same ID")
	return cmd
}

func runDLQRedrive(cmd *cobra.Command, f dlqFlags, arg string) error {
	id, err := decisionArgs(f, arg, "redriven")
	if err != nil {
		return err
	}
	cn, partitioner, err := redriveConn(cmd, f)
	if err != nil {
		return err
	}
	ctx, ds, spec, done, err := openDLQ(cmd, f, false)
	if err != nil {
		return err
	}
	defer done()
	plan, err := admin.PlanRedrive(ctx, ds, id)
	if err != nil {
		return decisionError(err, spec, id, "redrive", "nothing sent")
	}
	d, c := plan.DeadLetter, plan.Command
	out := &errWriter{w: cmd.OutOrStdout()}
	what := fmt.Sprintf("%s command with key %s (%d bytes of payload, %d user headers, %s) to topic %s, on its key's partition, with headers %s: %d and %s: %s (only group %s applies it; the topic's other groups skip it)",
		c.Type, bytesText(c.Key), len(c.Payload), len(c.Headers), commandIDText(c.ID, f.newID), d.Scope.Topic,
		envelope.RedriveOfHeader, id, envelope.RedriveForHeader, d.Scope.Group, d.Scope.Group)
	if !f.yes {
		fmt.Fprintf(out, "would redrive dead letter %d (%s offset %d, %s): produce a new %s; then mark it redriven\n",
			id, d.Scope, d.Record.Offset, d.Record.Reason, what)
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("refusing to redrive dead letter %d without --yes (nothing changed, nothing sent)", id)
	}

	// Connect first: a broker that cannot be reached changes nothing.
	rt, err := openRedriveRouter(ctx, cmd, f, cn, partitioner, d.Scope.Topic)
	if err != nil {
		return fmt.Errorf("%w (dead letter %d not changed, nothing sent)", err, id)
	}
	defer rt.Close()
	res, err := admin.Redrive(ctx, ds, rt, id, admin.RedriveOptions{Reason: f.reason, Actor: actor("workrouter dlq redrive"), RevertTimeout: f.timeout, NewID: f.newID})
	if err != nil {
		return redriveError(err, spec, id)
	}
	fmt.Fprintf(out, "redrove dead letter %d: %s as a new %s command with ID %s, for group %s only (headers %s: %d, %s: %s); it is redriven\n",
		id, res.Detail, res.Command.Type, res.Result.ID, d.Scope.Group, envelope.RedriveOfHeader, id, envelope.RedriveForHeader, d.Scope.Group)
	return out.err
}

// redriveConn resolves dlq redrive's broker connection and partitioner
// flags, before any dead letter is read.
func redriveConn(cmd *cobra.Command, f dlqFlags) (Conn, envelope.Partitioner, error) {
	cn, err := ResolveConn(cmd, f.conn, f.brokers)
	if err != nil {
		return Conn{}, 0, err
	}
	partitioner, err := envelope.ParsePartitioner(f.partitioner)
	if err != nil {
		return Conn{}, 0, fmt.Errorf("--partitioner: %w", err)
	}
	return cn, partitioner, nil
}

// openRedriveRouter opens the router a redrive produces to topic with:
// uncompressed, as the router's default, so that every client can read it.
func openRedriveRouter(ctx context.Context, cmd *cobra.Command, f dlqFlags, cn Conn, partitioner envelope.Partitioner, topic string) (*router.Router, error) {
	logger, err := quietLogger(cmd)
	if err != nil {
		return nil, err
	}
	return openRouter(ctx, produceFlags{brokers: cn.brokers, topic: topic, timeout: f.timeout}, cn, partitioner, envelope.CompressionNone, logger)
}

// redriveFilterFlags returns the filter flags of dlq redrive given on the
// command line, as --name.
func redriveFilterFlags(cmd *cobra.Command) []string {
	var names []string
	for _, n := range []string{"group", "topic", "partition", "type", "dead-letter-reason", "since", "all"} {
		if cmd.Flags().Changed(n) {
			names = append(names, "--"+n)
		}
	}
	return names
}

// runDLQRedriveFiltered is dlq redrive without an ID: admin.PlanRedrives,
// then, with --yes, admin.Redrives.
func runDLQRedriveFiltered(cmd *cobra.Command, f dlqFlags) error {
	filters := redriveFilterFlags(cmd)
	switch {
	case len(filters) == 0:
		return errors.New("dlq redrive needs a dead letter's ID, or filters (--group, --topic, --partition, --type, --dead-letter-reason, --since), or --all for every open dead letter")
	case f.all && len(filters) > 1:
		return fmt.Errorf("--all selects every open dead letter: give it without %s", strings.Join(slices.DeleteFunc(filters, func(n string) bool { return n == "--all" }), ", "))
	}
	if strings.TrimSpace(f.reason) == "" {
		return errors.New("--reason is required: say why the dead letters are redriven (it is recorded in their audit rows)")
	}
	q := admin.DeadLetterQuery{Group: f.group, Topic: f.topic, Type: f.typ, Reason: f.dlReason}
	if cmd.Flags().Changed("partition") {
		p := f.partition
		q.Partition = &p
	}
	if f.since != "" {
		var err error
		if q.Since, err = parseSince(f.since, time.Now()); err != nil {
			return err
		}
	}
	if err := q.Validate(); err != nil {
		return redriveQueryError(err)
	}
	cn, partitioner, err := redriveConn(cmd, f)
	if err != nil {
		return err
	}
	ctx, ds, _, done, err := openDLQ(cmd, f, false)
	if err != nil {
		return err
	}
	defer done()
	plan, err := admin.PlanRedrives(ctx, ds, q)
	if err != nil {
		return redriveQueryError(err)
	}
	out := &errWriter{w: cmd.OutOrStdout()}
	verb := "would redrive"
	if f.yes {
		verb = "redriving"
	}
	for _, pl := range plan.Plans {
		d, c := pl.DeadLetter, pl.Command
		fmt.Fprintf(out, "%s dead letter %d (%s offset %d, %s): a new %s command with key %s, %s, for group %s only\n",
			verb, d.ID, d.Scope, d.Record.Offset, d.Record.Reason, c.Type, bytesText(c.Key), commandIDText(c.ID, f.newID), d.Scope.Group)
	}
	for _, e := range plan.NotCommands {
		var nac *admin.NotACommandError
		errors.As(e, &nac)
		fmt.Fprintf(out, "cannot redrive dead letter %d: its record is not a workrouter command (%s); drop it (workrouter dlq drop %d) and produce a corrected command yourself\n",
			nac.ID, oneLine(nac.Err.Error()), nac.ID)
	}
	left := ""
	if n := len(plan.NotCommands); n > 0 {
		left = fmt.Sprintf("; %s left open (not commands)", nounCount(n, "dead letter"))
	}
	if len(plan.Plans) == 0 {
		fmt.Fprintf(out, "no open dead letter to redrive matches%s\n", left)
		if out.err != nil {
			return out.err
		}
		if len(plan.NotCommands) > 0 {
			return fmt.Errorf("nothing redriven: the %s selected cannot be redriven", nounCount(len(plan.NotCommands), "dead letter"))
		}
		return nil
	}
	topics := plan.Topics()
	if len(topics) > 1 {
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("the dead letters selected are on topics %s: redrive one topic at a time (--topic; nothing changed, nothing sent)", strings.Join(topics, ", "))
	}
	if !f.yes {
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("refusing to redrive %s without --yes%s (nothing changed, nothing sent)", nounCount(len(plan.Plans), "dead letter"), left)
	}
	// Connect first: a broker that cannot be reached changes nothing.
	rt, err := openRedriveRouter(ctx, cmd, f, cn, partitioner, topics[0])
	if err != nil {
		return fmt.Errorf("%w (no dead letter changed, nothing sent)", err)
	}
	defer rt.Close()
	res, rerr := admin.Redrives(ctx, ds, rt, plan, admin.RedriveOptions{Reason: f.reason, Actor: actor("workrouter dlq redrive"), RevertTimeout: f.timeout, NewID: f.newID})
	for _, r := range res.Redriven {
		fmt.Fprintf(out, "redrove dead letter %d: %s as a new %s command with ID %s\n", r.DeadLetter.ID, r.Detail, r.Command.Type, r.Result.ID)
	}
	for _, e := range res.ChangedFirst {
		fmt.Fprintf(out, "skipped: %s\n", oneLine(e.Error()))
	}
	if out.err != nil {
		return out.err
	}
	if rerr != nil {
		var re *admin.RedriveError
		if errors.As(rerr, &re) {
			return fmt.Errorf("redrove %d of %s, then: %w", len(res.Redriven), nounCount(len(plan.Plans), "dead letter"), redriveError(re, sinkSpec{}, re.ID))
		}
		return rerr
	}
	fmt.Fprintf(out, "redrove %s%s\n", nounCount(len(res.Redriven), "dead letter"), left)
	if n := len(res.ChangedFirst) + len(plan.NotCommands); n > 0 {
		return fmt.Errorf("%s of the %d selected not redriven (see above)", nounCount(n, "dead letter"), len(plan.Plans)+len(plan.NotCommands))
	}
	return out.err
}

// nounCount says n things: "1 dead letter", "2 dead letters".
func nounCount(n int, noun string) string {
	return fmt.Sprintf("%d %s", n, plural(n, noun, noun+"s"))
}

// redriveQueryError renders an *admin.QueryError of dlq redrive's filters
// with their flags.
func redriveQueryError(err error) error {
	var qe *admin.QueryError
	if errors.As(err, &qe) && qe.Field == "Reason" {
		return fmt.Errorf("--dead-letter-reason %s: want %s", qe.Value, qe.Want)
	}
	return queryFlagError(err)
}

// commandIDText says which command ID a redrive keeps, or that it takes
// a new one (--new-id).
func commandIDText(id string, newID bool) string {
	if newID {
		return "a new command ID (--new-id), not " + commandIDText(id, false)
	}
	if id == "" {
		return "no command ID: one is generated"
	}
	return "command ID " + id
}

// redriveError renders an error of admin.Redrive with the CLI's hints: a
// *admin.RedriveError says what was sent and the state the dead letter is
// left in; any other means nothing was sent (see decisionError).
func redriveError(err error, spec sinkSpec, id int64) error {
	var re *admin.RedriveError
	switch {
	case errors.As(err, &re) && re.Produced:
		return fmt.Errorf("dead letter %d was produced to %s partition %d offset %d, but marking it redriven failed: %w (it stays redriving)",
			id, re.Topic, re.Result.Partition, re.Result.Offset, re.Err)
	case errors.As(err, &re) && re.RevertErr != nil:
		return fmt.Errorf("redriving dead letter %d: producing failed (%w), and moving it back to open failed too (%v): it stays redriving; "+
			"check the topic for a record with header %s: %d before resolving it", id, re.Err, re.RevertErr, envelope.RedriveOfHeader, id)
	case errors.As(err, &re):
		return fmt.Errorf("redriving dead letter %d: producing failed: %w (it is open again, with an audit row saying so)", id, re.Err)
	}
	return decisionError(err, spec, id, "redrive", "nothing sent")
}

func newDLQDropCmd() *cobra.Command {
	var f dlqFlags
	cmd := &cobra.Command{
		Use:   "drop ID",
		Short: "Mark a dead letter handled: nothing more is done with it (audited; nothing is deleted)",
		Long: `drop moves an open dead letter to dropped, with an audit row recording
--reason: an operator decided it needs nothing more (it was a test record,
or a corrected command was produced instead). The row itself is kept.

Without --yes nothing is changed: it prints what it would do and exits
non-zero.`,
		Example: `  workrouter dlq drop 8 --sink sqlite:ledger.db --reason "not a command: a stray record from a test producer"
  workrouter dlq drop 8 --sink sqlite:ledger.db --reason "not a command: a stray record from a test producer" --yes`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runDLQDrop(cmd, f, args[0]) },
	}
	f.addCommon(cmd, false)
	fl := cmd.Flags()
	addDecisionFlags(fl, &f, "drop", "dropped", "nothing is changed")
	return cmd
}

func runDLQDrop(cmd *cobra.Command, f dlqFlags, arg string) error {
	id, err := decisionArgs(f, arg, "dropped")
	if err != nil {
		return err
	}
	ctx, ds, spec, done, err := openDLQ(cmd, f, false)
	if err != nil {
		return err
	}
	defer done()
	d, err := admin.PlanDrop(ctx, ds, id)
	if err != nil {
		return decisionError(err, spec, id, "drop", "nothing changed")
	}
	out := &errWriter{w: cmd.OutOrStdout()}
	if !f.yes {
		fmt.Fprintf(out, "would drop dead letter %d (%s offset %d, key %s, %s): open -> dropped, with an audit row\n",
			id, d.Scope, d.Record.Offset, bytesText(d.Record.Key), d.Record.Reason)
		if out.err != nil {
			return out.err
		}
		return fmt.Errorf("refusing to drop dead letter %d without --yes (nothing changed)", id)
	}
	if _, err := admin.Drop(ctx, ds, id, admin.DropOptions{Reason: f.reason, Actor: actor("workrouter dlq drop")}); err != nil {
		return decisionError(err, spec, id, "drop", "")
	}
	fmt.Fprintf(out, "dropped dead letter %d (%s offset %d); its row and audit rows are kept\n", id, d.Scope, d.Record.Offset)
	return out.err
}

// actor names who changed a dead letter, for its audit row: the tool,
// and the OS user and host that ran it ("workrouter dlq drop (by alice on
// ops-1)"); a user or host that cannot be read is "unknown".
func actor(tool string) string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if env := os.Getenv("USER"); env != "" {
		name = env
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("%s (by %s on %s)", tool, name, host)
}
