package chaos

import (
	"strings"
)

// resend sends a seeded number (5–20) of commands the broker had
// acknowledged again, with their command IDs, through the router: what an
// application does that retries Send after an ambiguous error whose first
// attempt had landed (cluster.Producer.Resend). Each copy is a record of
// its own that the workers must skip as a duplicate (X is per command ID).
// It happened when the broker acknowledged at least one copy.
func (r *run) resend() (bool, error) {
	n := 5 + r.rng.IntN(16)
	acked, ids, err := r.prod.Resend(r.ctx, n)
	if r.ctx.Err() != nil {
		return acked > 0, r.ctx.Err()
	}
	ex := ids[:min(len(ids), 5)]
	more := ""
	if len(ids) > len(ex) {
		more = " …"
	}
	r.logf("RESEND: %d acknowledged commands sent again with their IDs, as a retry after an ambiguous error (%s%s): %d acknowledged again",
		len(ids), strings.Join(ex, " "), more, acked)
	if err != nil {
		r.logf("  resend: %v (a copy that landed is skipped all the same)", err)
	}
	return acked > 0, nil
}
