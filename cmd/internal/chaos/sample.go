package chaos

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/internal/invariants"
)

// vSampler takes V's samples while the run goes on: every 1–2 s, the
// group's committed offsets and then the sink's NextOffsets
// (cluster.Store.SampleCommitted). The checker compares them at the end
// (invariants.Sample); a reading that failed (the broker down during a
// restart) or during which the topic's ID changed is counted, never
// dropped silently. Only its own goroutine (run) touches it until run
// returned.
type vSampler struct {
	samples    []invariants.Sample
	rounds     int // readings taken
	failed     int // readings that failed
	logChanged int // readings during which the topic's ID changed
	lastErr    error
}

// run samples until stop is closed, the first time at once.
func (v *vSampler) run(r *run, stop <-chan struct{}) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.brokers...))
	if err != nil {
		v.failed++
		v.lastErr = err
		r.logf("V sampling: no client: %v", err)
		return
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(r.cfg.Seed, r.cfg.Seed^0x5a3f))
	for {
		ctx, cancel := context.WithTimeout(r.ctx, 5*time.Second)
		ss, err := r.store.SampleCommitted(ctx, cl, group, r.topic)
		cancel()
		switch {
		case errors.Is(err, cluster.ErrLogChanged):
			v.logChanged++
			r.logf("V sampling: %v; reading skipped", err)
		case err != nil:
			v.failed++
			v.lastErr = err
		default:
			v.rounds++
			v.samples = append(v.samples, ss...)
		}
		t := time.NewTimer(time.Second + time.Duration(rng.Int64N(int64(time.Second))))
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
			return
		case <-r.ctx.Done():
			t.Stop()
			return
		}
	}
}
