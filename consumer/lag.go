package consumer

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// DefaultLagInterval is the default Config.LagInterval.
const DefaultLagInterval = 10 * time.Second

// lagLoop measures, every LagInterval until the Worker stops, the lag of
// every partition it processes and reports it as a Lag event. It also
// checks that the topic exists, at once and then with every measure (see
// watchTopic).
//
// It reports nothing once the Worker has begun to stop: the leave can
// wait on a JoinGroup in flight (up to the rebalance timeout plus the
// client's 10 s of request overhead when the coordinator dropped this
// member while it waited in the join), and meanwhile the group may have
// given its partitions to others, who move them on; this Worker's
// positions are stale, and a lag computed from them is lag no partition
// has.
func (w *Worker[Tx]) lagLoop() {
	defer w.wg.Done()
	adm := kadm.NewClient(w.cl) // shares the client; never closed here
	var topic topicWatch
	var signalled time.Time
	w.watchTopic(&topic)
	t := time.NewTicker(w.cfg.LagInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		case <-w.topicSig:
			// A fetch found the topic ID unknown: check now, at most
			// once a second.
			if time.Since(signalled) >= time.Second {
				signalled, topic.last = time.Now(), time.Time{}
				w.watchTopic(&topic)
			}
			continue
		}
		w.watchTopic(&topic)
		ctx, cancel := context.WithTimeout(w.ctx, w.cfg.LagInterval)
		ends, err := adm.ListEndOffsets(ctx, w.cfg.Topic)
		cancel()
		if err != nil {
			if w.ctx.Err() == nil {
				w.obs.emit(FetchFailed{Topic: w.cfg.Topic, Partition: -1, Err: err})
			}
			continue
		}
		w.route.seeCount(int32(len(ends[w.cfg.Topic])))
		if w.closing.Load() {
			return
		}
		if lag := w.lag(ends); len(lag) > 0 {
			w.obs.emit(Lag{Topic: w.cfg.Topic, Lag: lag})
		}
	}
}

// lag returns the lag of every partition this Worker processes.
func (w *Worker[Tx]) lag(ends kadm.ListedOffsets) map[int32]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[int32]int64, len(w.tenures))
	for p, t := range w.tenures {
		if !t.started.Load() || t.fenced.Load() {
			continue
		}
		end, ok := ends.Lookup(w.cfg.Topic, p)
		if !ok || end.Err != nil || end.Offset < 0 {
			continue
		}
		out[p] = max(end.Offset-t.next(), 0)
	}
	return out
}
