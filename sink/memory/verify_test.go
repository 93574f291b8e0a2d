package memory

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

func tok(epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: epoch, Member: member}
}

// injectHistory replaces s's history with events (numbered in order): the
// test hook for histories the public API refuses to produce.
func injectHistory(s *Sink, events []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = nil
	for _, ev := range events {
		s.record(ev)
	}
}

func claimEv(t epochs.Token) Event {
	return Event{Kind: Claim, Scope: t.Scope(), Token: t, Accepted: true}
}

func provenClaimEv(t epochs.Token) Event {
	e := claimEv(t)
	e.Proven = true
	return e
}

func applyEv(t epochs.Token, offs ...int64) Event {
	return Event{Kind: Apply, Scope: t.Scope(), Token: t, Offsets: offs, Accepted: true}
}

func resetEv(s epochs.Scope) Event {
	return Event{Kind: Reset, Scope: s, Accepted: true, Reason: "test"}
}

func TestVerifyCatchesViolations(t *testing.T) {
	a, b, a2 := tok(1, "a"), tok(2, "b"), tok(2, "a2")
	other := epochs.Token{Group: "g", Topic: "t", Partition: 1, Epoch: 1, Member: "a"}
	tests := []struct {
		name    string
		history []Event
		want    []string // "Invariant@Seq"
	}{
		{"clean", []Event{claimEv(a), applyEv(a, 0, 1), claimEv(b), applyEv(b, 2)}, nil},
		{"clean-reset-lower-epoch", []Event{claimEv(b), applyEv(b, 0), resetEv(b.Scope()), provenClaimEv(a), applyEv(a, 1)}, nil},
		{"F-unproven-claim-after-reset", []Event{claimEv(b), applyEv(b, 0), resetEv(b.Scope()), claimEv(a), applyEv(a, 1)}, []string{"F@4"}},
		{"refused-events-ignored", []Event{claimEv(b), {Kind: Apply, Scope: a.Scope(), Token: a, Offsets: []int64{0}}, {Kind: Claim, Scope: a.Scope(), Token: a}}, nil},
		{"F-stale-apply", []Event{claimEv(a), claimEv(b), applyEv(a, 0)}, []string{"F@3"}},
		{"F-apply-without-claim", []Event{applyEv(a, 0)}, []string{"F@1"}},
		{"F-apply-after-reset", []Event{claimEv(a), resetEv(a.Scope()), applyEv(a, 0)}, []string{"F@3"}},
		{"F-epoch-decrease", []Event{claimEv(b), claimEv(a)}, []string{"F@2"}},
		{"F-equal-epoch-other-member", []Event{claimEv(b), claimEv(a2)}, []string{"F@2"}},
		{"O-out-of-order", []Event{claimEv(a), applyEv(a, 5), applyEv(a, 3)}, []string{"O@3"}},
		{"X-twice", []Event{claimEv(a), applyEv(a, 0, 1), applyEv(a, 1, 2)}, []string{"X@3"}},
		{"scopes-separate", []Event{claimEv(a), claimEv(other), applyEv(a, 0), applyEv(other, 0)}, nil},
		{"all", []Event{claimEv(b), applyEv(b, 3), claimEv(a), applyEv(a, 2), applyEv(b, 3)}, []string{"F@3", "O@4", "F@5", "X@5"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			injectHistory(s, tc.history)
			err := s.Verify()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify() = %v, want nil", err)
				}
				return
			}
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify() = %v, want *VerifyError", err)
			}
			var got []string
			for _, v := range ve.Violations {
				if v.Scope != a.Scope() {
					t.Errorf("violation %v has scope %s", v, v.Scope)
				}
				got = append(got, v.Invariant+"@"+strconv.FormatUint(v.Seq, 10))
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("violations %v, want %v\n%v", got, tc.want, err)
			}
			for _, v := range ve.Violations {
				if !strings.Contains(err.Error(), v.String()) {
					t.Fatalf("Error() %q does not list %s", err, v)
				}
			}
		})
	}
}

// TestVerifyOnLiveSink drives a real history with a stale tenure, a
// reset, a lower-epoch claim and replays, and checks that Verify accepts it
// and that Rejected counts the refusals.
func TestVerifyOnLiveSink(t *testing.T) {
	s := New()
	ctx := t.Context()
	a, b, c := tok(3, "a"), tok(4, "b"), tok(1, "c")
	noop := func(context.Context, *Tx, int) error { return nil }
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	fenced := func(err error) {
		t.Helper()
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("error %v, want sink.ErrFenced", err)
		}
	}
	_, err := s.Claim(ctx, a, sink.Observed{})
	must(err)
	_, err = s.Apply(ctx, a, sink.Batch{Offsets: []int64{0, 1}}, noop)
	must(err)
	_, err = s.Claim(ctx, b, sink.Observed{})
	must(err)
	_, err = s.Apply(ctx, a, sink.Batch{Offsets: []int64{2}}, noop)
	fenced(err)
	_, err = s.Apply(ctx, b, sink.Batch{Offsets: []int64{0, 1, 2}}, noop) // 0, 1 replayed
	must(err)
	_, err = s.Claim(ctx, c, sink.Observed{})
	fenced(err)
	_, err = s.ResetFence(ctx, fenceadmin.ResetRequest{Scope: c.Scope(), Expect: sink.Fence{Scope: c.Scope(), Holder: b, NextOffset: 3}, Reason: "group recreated"})
	must(err)
	_, err = s.Apply(ctx, b, sink.Batch{Offsets: []int64{3}}, noop)
	fenced(err)
	_, err = s.Claim(ctx, c, sink.Observed{Proof: &sink.Proof{Version: fenceVersion(t, s, c.Scope())}})
	must(err)
	_, err = s.Apply(ctx, c, sink.Batch{Offsets: []int64{3}}, noop)
	must(err)
	if err := s.Verify(); err != nil {
		t.Fatal(err)
	}
	if got := s.Rejected(); got != 3 {
		t.Fatalf("Rejected() = %d, want 3", got)
	}
}

// fenceVersion returns the version of scope's fence in s (what a claimer
// reads before it proves its membership).
func fenceVersion(t testing.TB, s *Sink, scope epochs.Scope) int64 {
	t.Helper()
	s.mu.RLock()
	defer s.mu.RUnlock()
	if st := s.scopes[scope]; st != nil {
		return int64(st.gen)
	}
	return 0
}
