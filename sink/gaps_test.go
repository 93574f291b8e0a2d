package sink_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// TestCheckpointAddMatchesModel adds random ranges to a Checkpoint and
// to a bitmap of done offsets, and checks after every step that the
// checkpoint says what the bitmap says: the watermark is the first offset
// not done, the spans are exactly the done runs above it, and the
// invariants hold.
func TestCheckpointAddMatchesModel(t *testing.T) {
	const n = 200
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 1))
		var c sink.Checkpoint
		done := make([]bool, n+8)
		for step := range 60 {
			from := int64(r.IntN(n))
			to := from + int64(r.IntN(8))
			if r.IntN(10) == 0 {
				c.Raise(to)
				from = 0
			} else {
				c.Add(from, to)
			}
			for o := from; o < to; o++ {
				done[o] = true
			}
			want := model(done)
			if err := c.Valid(); err != nil {
				t.Fatalf("seed %d step %d: %v (%+v)", seed, step, err, c)
			}
			if c.NextOffset != want.NextOffset || len(c.Done) != len(want.Done) {
				t.Fatalf("seed %d step %d: checkpoint %+v, want %+v", seed, step, c, want)
			}
			for i := range c.Done {
				if c.Done[i] != want.Done[i] {
					t.Fatalf("seed %d step %d: checkpoint %+v, want %+v", seed, step, c, want)
				}
			}
			for o := range int64(n) {
				if c.Contains(o) != done[o] {
					t.Fatalf("seed %d step %d: Contains(%d) = %v, want %v", seed, step, o, c.Contains(o), done[o])
				}
			}
			end := want.NextOffset
			if len(want.Done) > 0 {
				end = want.Done[len(want.Done)-1].To
			}
			if c.End() != end {
				t.Fatalf("seed %d step %d: End %d, want %d", seed, step, c.End(), end)
			}
		}
	}
}

// model returns the checkpoint of a bitmap of done offsets.
func model(done []bool) sink.Checkpoint {
	var c sink.Checkpoint
	o := 0
	for o < len(done) && done[o] {
		o++
	}
	c.NextOffset = int64(o)
	for o < len(done) {
		if !done[o] {
			o++
			continue
		}
		s := o
		for o < len(done) && done[o] {
			o++
		}
		c.Done = append(c.Done, sink.Span{From: int64(s), To: int64(o)})
	}
	return c
}

// TestCheckpointValidRefuses checks that Valid names each broken
// invariant of Done.
func TestCheckpointValidRefuses(t *testing.T) {
	for _, c := range []sink.Checkpoint{
		{NextOffset: 5, Done: []sink.Span{{From: 5, To: 7}}},         // touches the watermark
		{NextOffset: 5, Done: []sink.Span{{From: 3, To: 4}}},         // below it
		{NextOffset: 0, Done: []sink.Span{{From: 2, To: 4}, {4, 6}}}, // touching spans
		{NextOffset: 0, Done: []sink.Span{{From: 4, To: 6}, {2, 3}}}, // not ascending
		{NextOffset: 0, Done: []sink.Span{{From: 4, To: 4}}},         // empty
	} {
		if err := c.Valid(); err == nil {
			t.Errorf("Valid(%+v) = nil, want an error", c)
		}
	}
	if err := (sink.Checkpoint{NextOffset: 1, Done: []sink.Span{{From: 2, To: 3}, {From: 5, To: 9}}}).Valid(); err != nil {
		t.Errorf("Valid of a valid checkpoint: %v", err)
	}
}

// TestCheckBatch checks the validation of Apply's arguments against the
// sink's features.
func TestCheckBatch(t *testing.T) {
	tok := epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: 1, Member: "m"}
	effect := sink.Effect[struct{}](func(context.Context, struct{}, int) error { return nil })
	all := sink.Features{DedupeWindow: 10, Gaps: true, DeadLetters: true}
	good := sink.Batch{Offsets: []int64{3, 7, 8}, From: []int64{1, 4, 8}, IDs: []string{"a", "", "c"}}
	if err := sink.CheckBatch(tok, good, effect, all); err != nil {
		t.Fatalf("good batch refused: %v", err)
	}
	for name, b := range map[string]sink.Batch{
		"short From":    {Offsets: []int64{3, 7}, From: []int64{3}},
		"From above":    {Offsets: []int64{3, 7}, From: []int64{3, 8}},
		"From overlaps": {Offsets: []int64{3, 7}, From: []int64{3, 3}},
		"negative From": {Offsets: []int64{3}, From: []int64{-1}},
		"IDs length":    {Offsets: []int64{3}, From: []int64{3}, IDs: []string{"a", "b"}},
		"not ascending": {Offsets: []int64{7, 3}, From: []int64{7, 3}},
		"negative":      {Offsets: []int64{-1}},
		"long ID":       {Offsets: []int64{3}, IDs: []string{strings.Repeat("x", sink.MaxCommandIDLen+1)}},
	} {
		if err := sink.CheckBatch(tok, b, effect, all); !errors.Is(err, sink.ErrBadBatch) {
			t.Errorf("%s: %v, want ErrBadBatch", name, err)
		}
	}
	if err := sink.CheckBatch[struct{}](tok, sink.Batch{Offsets: []int64{1}}, nil, all); !errors.Is(err, sink.ErrBadBatch) {
		t.Errorf("nil effect: %v, want ErrBadBatch", err)
	}
	// A batch that needs a feature the sink lacks.
	for name, tc := range map[string]struct {
		b sink.Batch
		f sink.Features
	}{
		"a lane without gaps":  {sink.Batch{Offsets: []int64{3}, From: []int64{3}}, sink.Features{DedupeWindow: 10}},
		"IDs without a window": {sink.Batch{Offsets: []int64{3}, IDs: []string{"a"}}, sink.Features{Gaps: true}},
	} {
		if err := sink.CheckBatch(tok, tc.b, effect, tc.f); !errors.Is(err, sink.ErrUnsupported) || errors.Is(err, sink.ErrBadBatch) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
	if err := sink.CheckDeadLetter(tok, sink.DeadRecord{Offset: 3, Reason: "x"}, sink.Features{}); !errors.Is(err, sink.ErrUnsupported) {
		t.Errorf("a dead letter without dead letters: %v, want ErrUnsupported", err)
	}
	if err := sink.CheckDeadLetter(tok, sink.DeadRecord{Offset: 3, Reason: "x"}.InLane(2), sink.Features{DeadLetters: true}); !errors.Is(err, sink.ErrUnsupported) {
		t.Errorf("a lane's dead letter without gaps: %v, want ErrUnsupported", err)
	}
	if err := sink.CheckDeadLetter(tok, sink.DeadRecord{Offset: 3, Reason: "x"}.InLane(4), all); !errors.Is(err, sink.ErrBadBatch) {
		t.Errorf("a lane's dead letter from past its offset: %v, want ErrBadBatch", err)
	}
}
