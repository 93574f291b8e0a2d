package chaos

import (
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// killRedisClients is the sink-conn fault on Redis: CLIENT KILL of every
// connection of worker w (found by its client name). Redis runs one
// command at a time, so a kill never lands inside a script: it lands
// between the worker's scripts (the next one fails to send and is
// retried), or after a script ran and before the worker read its reply
// (an ambiguous outcome: the retry finds the batch applied and replays
// it). lastScript reports that a killed connection's last command was a
// script.
func (r *run) killRedisClients(w *cluster.Worker) (bool, error) {
	var n int
	var lastScript bool
	_ = r.waitUntil(3*time.Second, "a Redis connection of "+w.Name(), func() bool {
		var err error
		n, lastScript, err = r.store.KillRedisClients(r.ctx, w.Name())
		return err == nil && n > 0
	})
	r.logf("SINK-CONN %s: CLIENT KILL on %d connections (last command a script: %v)", w.Name(), n, lastScript)
	return n > 0, r.ctx.Err()
}
