package sinktest

import (
	"context"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// testSameMemberNewEpochDuringApply: a partition often comes back to the
// same member, under a new epoch (a rebalance that bumped the generation,
// a KIP-848 member epoch that moved on). A batch of the old tenure (m at
// epoch 1) whose effects are running when m claims at epoch 2 is fenced,
// and writes nothing: the holder check in the write compares the epoch,
// not only the member. For Apply (after a committed batch of the tenure,
// so a backend that keeps a view of its last batch runs this one on it),
// an Apply with IDs and a lane's Apply.
func (c *suite[Tx]) testSameMemberNewEpochDuringApply(t *testing.T) {
	if c.h.WritesSerialized {
		t.Skip("sinktest: Harness.WritesSerialized: a claim cannot land while an Apply runs its effect, so this race cannot happen")
	}
	type call func(s sink.Sink[Tx], tok epochs.Token, offs []int64, effect sink.Effect[Tx]) error
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, s sink.Sink[Tx], m1 epochs.Token) (next int64, apply call, claim func(epochs.Token))
	}{
		{"Apply", func(t *testing.T, s sink.Sink[Tx], m1 epochs.Token) (int64, call, func(epochs.Token)) {
			c.claim(t, s, m1)
			c.apply(t, s, m1, []int64{0}, c.putEffect(t, "k", []int64{0}, "m1"))
			return 1, func(s sink.Sink[Tx], tok epochs.Token, offs []int64, effect sink.Effect[Tx]) error {
				_, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, effect)
				return err
			}, func(tok epochs.Token) { c.claim(t, s, tok) }
		}},
		{"ApplyIDs", func(t *testing.T, s sink.Sink[Tx], m1 epochs.Token) (int64, call, func(epochs.Token)) {
			d := c.dedup(t, s)
			c.claim(t, s, m1)
			return 0, func(s sink.Sink[Tx], tok epochs.Token, offs []int64, effect sink.Effect[Tx]) error {
				_, err := d.Apply(t.Context(), tok, sink.Batch{Offsets: offs, IDs: []string{"cmd"}}, effect)
				return err
			}, func(tok epochs.Token) { c.claim(t, s, tok) }
		}},
		{"ApplyLane", func(t *testing.T, s sink.Sink[Tx], m1 epochs.Token) (int64, call, func(epochs.Token)) {
			g := c.gaps(t, s)
			claimGapped(t, g, m1)
			return 0, func(s sink.Sink[Tx], tok epochs.Token, offs []int64, effect sink.Effect[Tx]) error {
				_, err := g.Apply(t.Context(), tok, plain(offs...), effect)
				return err
			}, func(tok epochs.Token) { claimGapped(t, g, tok) }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := c.h.Open(t)
			scope := scopeFor(t)
			m1, m2 := tokenFor(scope, 1, "m"), tokenFor(scope, 2, "m")
			next, apply, claim := tc.setup(t, s, m1)
			raced := false
			put := c.putEffect(t, "k", []int64{next}, "m1")
			err := apply(s, m1, []int64{next}, func(ctx context.Context, tx Tx, i int) error {
				if !raced {
					raced = true
					claim(m2) // the same member, a new epoch
				}
				return put(ctx, tx, i)
			})
			if !raced {
				t.Fatal("the batch never ran its effect: the race did not happen")
			}
			mustFenced(t, err, sink.OpApply, m2, m1)
			c.mustAbsent(t, s, key(t, "k", next))
			if got := c.claim(t, s, m2); got != next {
				t.Fatalf("NextOffset after the fenced batch = %d, want %d", got, next)
			}
		})
	}
}
