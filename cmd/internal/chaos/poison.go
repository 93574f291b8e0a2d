package chaos

import (
	"fmt"
	"strings"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// poison writes one record of every poison kind, in a seeded order, each
// to a seeded partition, a few tens of milliseconds apart so that good
// commands land between them; then, to another seeded partition, the
// poison producer's transactions (cluster.PoisonProducer.Transactions):
// poison records right after a commit marker and right after an aborted
// transaction, so that a worker dead-letters them above its checkpoint;
// the load producer waits meanwhile, so that nothing lands between a
// marker and the poison record after it.
// It happened when the broker acknowledged at least one poison record.
func (r *run) poison() (bool, error) {
	kinds := cluster.PoisonKinds()
	r.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	var acked []string
	for i, k := range kinds {
		if i > 0 {
			if err := r.sleep(time.Duration(20+r.rng.IntN(60)) * time.Millisecond); err != nil {
				return len(acked) > 0, err
			}
		}
		p := int32(r.rng.IntN(int(r.cfg.Partitions)))
		rec, err := r.poisonProd.Send(r.ctx, p, k)
		if err != nil {
			if r.ctx.Err() != nil {
				return len(acked) > 0, r.ctx.Err()
			}
			r.logf("  poison: %v (if it landed, its dead letter says so)", err)
			continue
		}
		acked = append(acked, fmt.Sprintf("%s@p%d/%d", k, rec.Partition, rec.Offset))
	}
	r.logf("POISON: %d records from a foreign producer acknowledged between the good commands: %s", len(acked), strings.Join(acked, " "))
	p := int32(r.rng.IntN(int(r.cfg.Partitions)))
	before := len(r.poisonProd.Acked())
	r.quiet.Lock() // the load producer waits: a marker, then the poison record at once
	what, err := r.poisonProd.Transactions(r.ctx, p)
	r.quiet.Unlock()
	if err != nil && r.ctx.Err() != nil {
		return len(acked) > 0, r.ctx.Err()
	}
	r.logf("  POISON in transactions on partition %d: %s", p, what)
	if err != nil {
		r.logf("  poison transactions: %v (records whose transaction may have committed count if dead-lettered)", err)
	}
	return len(acked) > 0 || len(r.poisonProd.Acked()) > before, nil
}
