package jsonl_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/router"
	"github.com/workrouter/workrouter/router/jsonl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const topic = "cmds"

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCluster starts a kfake broker with topic of partitions partitions.
func newCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newRouter(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *router.Router {
	t.Helper()
	r, err := router.New(testContext(t), router.Config{Brokers: c.ListenAddrs(), Topic: topic, ClientOpts: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// consume reads every record of topic (n of them) from the start, in
// partition order, and decodes them.
func consume(t *testing.T, c *kfake.Cluster, n int) []envelope.Command {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testContext(t)
	var cmds []envelope.Command
	for len(cmds) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d records: %v", len(cmds), n, err)
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			c, err := envelope.Decode(r)
			if err != nil {
				t.Fatalf("decode %d@%d: %v", r.Partition, r.Offset, err)
			}
			cmds = append(cmds, c)
		})
	}
	return cmds
}

// seqLines returns n lines over keys keys: line i (from 1) is key
// "k<i%keys>" with payload {"line":i,"seq":s}, s counting that key's
// lines from 1.
func seqLines(n, keys int) []string {
	seq := make([]int, keys)
	lines := make([]string, n)
	for i := range lines {
		k := (i + 1) % keys
		seq[k]++
		lines[i] = fmt.Sprintf(`{"key":"k%d","type":"step","payload":{"line":%d,"seq":%d}}`, k, i+1, seq[k])
	}
	return lines
}

// lineOf returns the line number in a payload made by seqLines.
func lineOf(t *testing.T, c envelope.Command) (line, seq int) {
	t.Helper()
	if _, err := fmt.Sscanf(string(c.Payload), `{"line":%d,"seq":%d}`, &line, &seq); err != nil {
		t.Fatalf("payload %q: %v", c.Payload, err)
	}
	return line, seq
}

// TestRunKeepsEachKeysOrder: 30,000 lines over 7 keys on 3 partitions,
// pipelined: a consumer sees each key's commands exactly once and in file
// order (the sequence numbers 1, 2, 3, … with no gap, repeat or swap).
func TestRunKeepsEachKeysOrder(t *testing.T) {
	c := newCluster(t, 3)
	p, err := jsonl.New(newRouter(t, c), jsonl.Config{MaxInFlight: 5000})
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 30_000, 7
	rep, err := p.Run(testContext(t), strings.NewReader(strings.Join(seqLines(n, keys), "\n")+"\n"))
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if rep.Lines != n || rep.Sent != n || rep.Acked != n || rep.Failed != 0 || rep.LastSent != n || p.Acknowledged() != n {
		t.Fatalf("report %+v (Acknowledged %d), want %d lines sent and acknowledged", rep, p.Acknowledged(), n)
	}
	next := map[string]int{}
	for _, cmd := range consume(t, c, n) {
		_, seq := lineOf(t, cmd)
		k := string(cmd.Key)
		if seq != next[k]+1 {
			t.Fatalf("key %s: command %d after %d: the key's commands are not applied in sequence", k, seq, next[k])
		}
		next[k] = seq
	}
	if len(next) != keys {
		t.Fatalf("%d keys consumed, want %d", len(next), keys)
	}
}

// TestRunStopsAtABadLine: with a bad line in the middle, every line before
// it is acknowledged and written exactly once, nothing after it is sent,
// and the error names the line.
func TestRunStopsAtABadLine(t *testing.T) {
	c := newCluster(t, 4)
	p, err := jsonl.New(newRouter(t, c), jsonl.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lines := seqLines(6000, 5)
	const bad = 4000
	lines[bad-1] = `{"key":"k1","type":"step","payload":{"line":4000}` // unterminated
	rep, err := p.Run(testContext(t), strings.NewReader(strings.Join(lines, "\n")))
	var le *jsonl.LineError
	if !errors.Is(err, jsonl.ErrLinesFailed) || !errors.Is(err, jsonl.ErrSyntax) || !errors.As(err, &le) || le.Line != bad {
		t.Fatalf("Run: %v, want ErrLinesFailed for line %d, ErrSyntax", err, bad)
	}
	if !strings.Contains(err.Error(), "line 4000: ") || !strings.Contains(err.Error(), "no line after line 3999 was sent") {
		t.Fatalf("error %q does not name line 4000 and the last line sent", err)
	}
	if rep.Failed != 1 || rep.StoppedAt != bad || rep.Sent != bad-1 || rep.Acked != bad-1 || rep.LastSent != bad-1 || rep.Lines != bad {
		t.Fatalf("report %+v", rep)
	}
	seen := map[int]int{}
	for _, cmd := range consume(t, c, bad-1) {
		line, _ := lineOf(t, cmd)
		seen[line]++
	}
	for line := 1; line < bad; line++ {
		if seen[line] != 1 {
			t.Errorf("line %d written %d times, want once", line, seen[line])
		}
	}
	if len(seen) != bad-1 {
		t.Fatalf("%d distinct lines written, want %d", len(seen), bad-1)
	}
}

// TestRunReportsRefusedSends: the broker refuses one produce request
// (INVALID_RECORD, which kgo does not retry). Every refused line is
// reported with its number and command ID, the run stops, acknowledged
// and failed add up to what was sent, the topic holds exactly the
// acknowledged commands, and any command written after an earlier command
// of its key failed is reported as out of order: a consumer finds no key
// whose sequence has a hole with later commands behind it that the report
// does not name.
func TestRunReportsRefusedSends(t *testing.T) {
	c := newCluster(t, 2)
	var produces, refused atomic.Int32
	c.KeepControl()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if produces.Add(1) != 5 {
			return nil, nil, false
		}
		refused.Add(1)
		pr := req.(*kmsg.ProduceRequest)
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range pr.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	p, err := jsonl.New(newRouter(t, c), jsonl.Config{MaxInFlight: 2000, MaxReported: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	const n, keys = 20_000, 3
	rep, err := p.Run(testContext(t), strings.NewReader(strings.Join(seqLines(n, keys), "\n")))
	if refused.Load() != 1 {
		t.Fatalf("the broker refused %d produce requests, want 1 (of %d)", refused.Load(), produces.Load())
	}
	if !errors.Is(err, jsonl.ErrLinesFailed) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("Run: %v, want ErrLinesFailed and INVALID_RECORD", err)
	}
	if rep.Failed == 0 || int64(len(rep.Failures)) != rep.Failed || rep.Acked+rep.Failed != rep.Sent || rep.Sent >= n {
		t.Fatalf("report: %d sent, %d acknowledged, %d failed (%d listed) of %d lines: want a stopped run whose outcomes add up",
			rep.Sent, rep.Acked, rep.Failed, len(rep.Failures), n)
	}
	failed := map[int]bool{}
	for _, f := range rep.Failures {
		if f.Line < 1 || f.ID == "" || !errors.Is(&f, kerr.InvalidRecord) {
			t.Fatalf("failure %v: want a line number, the command ID and the broker's error", &f)
		}
		failed[int(f.Line)] = true
	}
	if !slices.IsSortedFunc(rep.Failures, func(a, b jsonl.LineError) int { return int(a.Line - b.Line) }) {
		t.Fatalf("failures not listed by line number")
	}
	reported := map[int]bool{}
	for _, w := range rep.OutOfOrderWrites {
		reported[int(w.Line)] = true
	}
	if int64(len(reported)) != rep.OutOfOrder || (rep.OutOfOrder > 0) != errors.Is(err, jsonl.ErrOutOfOrder) {
		t.Fatalf("%d out-of-order writes counted, %d listed, error %v", rep.OutOfOrder, len(reported), err)
	}
	// The consumer's check: per key, a command written after a hole (a
	// line of the key that is not written) is one the report names.
	cmds := consume(t, c, int(rep.Acked))
	if len(cmds) != int(rep.Acked) {
		t.Fatalf("%d records, want the %d acknowledged", len(cmds), rep.Acked)
	}
	next, hole, outOfOrder := map[string]int{}, map[string]bool{}, 0
	for _, cmd := range cmds {
		line, seq := lineOf(t, cmd)
		k := string(cmd.Key)
		if failed[line] {
			t.Fatalf("line %d is reported failed but was written", line)
		}
		if seq != next[k]+1 {
			hole[k] = true
		}
		if hole[k] {
			outOfOrder++
			if !reported[line] {
				t.Errorf("line %d (key %s, seq %d) written after a hole in its key's sequence, not reported", line, k, seq)
			}
		}
		next[k] = seq
	}
	if outOfOrder != int(rep.OutOfOrder) {
		t.Fatalf("the consumer found %d commands written after a hole, the report %d", outOfOrder, rep.OutOfOrder)
	}
	t.Logf("%d sent, %d acknowledged, %d failed (first line %d), %d written out of order", rep.Sent, rep.Acked, rep.Failed, rep.StoppedAt, rep.OutOfOrder)
}

// TestRunReportsRefusedCommands: a line the router refuses (a reserved
// header, a command too large for a batch) stops the run like a
// malformed one.
func TestRunReportsRefusedCommands(t *testing.T) {
	c := newCluster(t, 2)
	rt := newRouter(t, c, kgo.ProducerBatchMaxBytes(4096))
	for _, tc := range []struct {
		line string
		want error
	}{
		{`{"key":"a","type":"t","headers":{"workrouter-x":"1"}}`, envelope.ErrReservedHeader},
		{`{"key":"a","type":"t","payload":"` + strings.Repeat("x", 5000) + `"}`, router.ErrRecordTooLarge},
	} {
		p, err := jsonl.New(rt, jsonl.Config{})
		if err != nil {
			t.Fatal(err)
		}
		in := `{"key":"a","type":"t"}` + "\n" + tc.line + "\n" + `{"key":"a","type":"t"}` + "\n"
		rep, err := p.Run(testContext(t), strings.NewReader(in))
		var le *jsonl.LineError
		if !errors.Is(err, tc.want) || !errors.As(err, &le) || le.Line != 2 || rep.Acked != 1 || rep.LastSent > 2 {
			t.Fatalf("line %.60s…: %v, report %+v; want %v at line 2 and line 1 acknowledged", tc.line, err, rep, tc.want)
		}
	}
}

func TestParseLine(t *testing.T) {
	c, err := jsonl.ParseLine([]byte(` {"key":"k","type":"t","id":"dep-7","payload":{"a": [1, 2]},"headers":{"z":"1","a":"2"}} `))
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "dep-7" || string(c.Key) != "k" || c.Type != "t" {
		t.Errorf("command %+v", c)
	}
	if string(c.Payload) != `{"a": [1, 2]}` {
		t.Errorf("payload %q: want the JSON value as written", c.Payload)
	}
	if !slices.EqualFunc(c.Headers, []envelope.Header{{Key: "a", Value: []byte("2")}, {Key: "z", Value: []byte("1")}},
		func(a, b envelope.Header) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
		t.Errorf("headers %v: want sorted by key", c.Headers)
	}
	for line, payload := range map[string]string{
		`{"key":"k","type":"t","payload":"plain \"text\""}`: `plain "text"`,
		`{"key":"k","type":"t","payload":null}`:             "",
		`{"key":"k","type":"t"}`:                            "",
		`{"key":"k","type":"t","payload":12}`:               "12",
	} {
		if c, err := jsonl.ParseLine([]byte(line)); err != nil || string(c.Payload) != payload {
			t.Errorf("ParseLine(%s): payload %q, %v; want %q", line, c.Payload, err, payload)
		}
	}
	for line, want := range map[string]string{
		`[1]`:                                "want a JSON object",
		`{"key":"k"}`:                        "empty command type",
		`{"type":"t"}`:                       "empty command key",
		`{"key":"k","type":"t","x":1}`:       `unknown field "x"`,
		`{"key":"k","type":"t"} {}`:          "more than one value",
		`{"key":"k","type":"t","headers":1}`: "cannot unmarshal",
		`{"key":"k","type":"t","id":"a\tb"}`: "invalid command ID",
		`{"key":"k","type":"t","id":7}`:      "cannot unmarshal",
	} {
		if _, err := jsonl.ParseLine([]byte(line)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseLine(%s): %v, want an error containing %q", line, err, want)
		}
	}
}

// FuzzParseLine: on every line the fast decoder accepts, encoding/json
// decodes the same command (ParseLine falls back to it for the others).
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"key":"k","type":"t"}`,
		` { "key" : "k" , "type":"t", "id":"i-1", "payload" : {"a": [1, "x\"y"]} , "headers":{"b":"1","a":"2"} } `,
		`{"key":"k","type":"t","payload":"text"}`,
		`{"key":"k","type":"t","payload":""}`,
		`{"key":"k","type":"t","payload":null,"headers":null}`,
		`{"key":"k","type":"t","payload":12.5e3}`,
		`{"key":"k","type":"t","payload":[true,false,null]}`,
		`{"key":"k","key":"j","type":"t"}`,
		`{"KEY":"k","type":"t"}`,
		`{"key":"ké","type":"t"}`,
		`{"key":"k\u00e9","type":"t"}`,
		`{"key":"k","type":"t","headers":{"a":"1","a":"2"}}`,
		`{"key":"k","type":"t"} {}`,
		`{}`,
		`{"key":"k","type":"t","payload":tru}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimSpace(line)
		fast, ok := jsonl.ParseFastForTest(line)
		if !ok {
			return
		}
		slow, err := jsonl.ParseSlowForTest(line)
		if err != nil {
			if fast.Validate() == nil {
				t.Fatalf("%q: fast decoder accepts %+v, encoding/json fails: %v", line, fast, err)
			}
			return
		}
		if string(fast.Key) != string(slow.Key) || fast.Type != slow.Type || fast.ID != slow.ID ||
			!bytes.Equal(fast.Payload, slow.Payload) ||
			!slices.EqualFunc(fast.Headers, slow.Headers, func(a, b envelope.Header) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", line, fast, slow)
		}
	})
}
