package consumer

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/epochs"
)

// onAssigned captures the tenure token of every newly assigned partition
// (docs/design.md#token): the group epoch at this moment and this member's
// ID. A partition kept across a rebalance keeps its tenure, and so its
// token, even though the group's epoch moved on (hazard 2). It runs on the
// group's goroutine, before adjustOffsets claims the partitions; kgo calls
// it after every join or reassignment, even with nothing new, and it
// records the member ID it ran under for Ready.
func (w *Worker[Tx]) onAssigned(_ context.Context, cl *kgo.Client, assigned map[string][]int32) {
	<-w.ready
	member, epoch := cl.GroupMetadata()
	for _, p := range assigned[w.cfg.Topic] {
		tok := epochs.Token{Group: w.cfg.Group, Topic: w.cfg.Topic, Partition: p, Epoch: epoch, Member: member}
		w.mu.Lock()
		old := w.tenures[p]
		if old != nil && old.tok == tok {
			w.mu.Unlock()
			continue
		}
		t := newTenure(w, tok)
		w.tenures[p] = t
		w.mu.Unlock()
		if old != nil { // a stale tenure that was never revoked: stop it hard
			old.stop()
			old.cancel()
		}
		w.obs.emit(Assigned{Token: tok})
	}
	w.mu.Lock()
	w.synced, w.syncedEpoch = member, epoch
	w.mu.Unlock()
	w.renewKept(member)
}
