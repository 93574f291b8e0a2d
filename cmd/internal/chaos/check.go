package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
)

// Records is what the checker reads after a run: the sink's own postings
// and accepted claims, and the commands the broker acknowledged.
type Records struct {
	// Postings are the ledger's postings (one per applied command).
	Postings []cluster.Posting
	// Claims are each partition's accepted claims, oldest first.
	Claims map[int32][]cluster.Claim
	// Acked are the acknowledged commands by command ID.
	Acked map[string]cluster.Acked
	// BalanceMismatches counts accounts whose balance is not the sum of
	// their postings (an effect applied partly or twice).
	BalanceMismatches int
}

// Violations counts the violations of each invariant of DESIGN.md §7.
type Violations struct {
	// F: postings written under a stale token after a newer claim.
	F int `json:"F"`
	// L: acknowledged commands with no posting.
	L int `json:"L"`
	// O: postings whose per-account seq is not greater than the one
	// before them (per key, in partition-offset order).
	O int `json:"O"`
	// X: extra postings of a command applied more than once, plus
	// accounts whose balance does not match their postings.
	X int `json:"X"`
	// V: 1 if lag did not return to zero with every command applied
	// within the recovery timeout after the faults stopped.
	V int `json:"V"`
}

// Total is the sum of all violations.
func (v Violations) Total() int { return v.F + v.L + v.O + v.X + v.V }

// Check verifies F, L, O and X over r and returns the counts and a few
// human-readable examples of each kind found. V is decided by the run, not
// by the records. Any goroutine may call it.
func Check(r Records) (Violations, []string) {
	var v Violations
	var notes []string
	note := func(format string, args ...any) {
		if len(notes) < 20 {
			notes = append(notes, fmt.Sprintf(format, args...))
		}
	}
	postings := slices.Clone(r.Postings)
	slices.SortFunc(postings, func(a, b cluster.Posting) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})

	// F: a posting at or past a claim's NextOffset must carry that claim's
	// token or a newer one.
	for _, p := range postings {
		for _, c := range r.Claims[p.Partition] {
			if p.Offset >= c.Next && (p.Epoch < c.Epoch || (p.Epoch == c.Epoch && p.Member != c.Member)) {
				v.F++
				note("F: partition %d offset %d written at epoch %d by %s after the claim at epoch %d by %s from offset %d",
					p.Partition, p.Offset, p.Epoch, p.Member, c.Epoch, c.Member, c.Next)
				break
			}
		}
	}

	// X and L: each acknowledged command exactly once.
	seen := map[string]int{}
	for _, p := range postings {
		if seen[p.ID]++; seen[p.ID] > 1 {
			v.X++
			note("X: command %s applied again at partition %d offset %d", p.ID, p.Partition, p.Offset)
		}
	}
	v.X += r.BalanceMismatches
	if r.BalanceMismatches > 0 {
		note("X: %d account balances do not match their postings", r.BalanceMismatches)
	}
	for _, id := range slices.Sorted(maps.Keys(r.Acked)) {
		if seen[id] == 0 {
			v.L++
			a := r.Acked[id]
			note("L: acknowledged command %s (%s seq %d) was never applied", id, a.Account, a.Seq)
		}
	}

	// O: per account, seqs grow in (partition, offset) order.
	last := map[string]int{}
	for _, p := range postings {
		if prev, ok := last[p.Account]; ok && p.Seq <= prev {
			v.O++
			note("O: %s seq %d at partition %d offset %d after seq %d", p.Account, p.Seq, p.Partition, p.Offset, prev)
		}
		last[p.Account] = p.Seq
	}
	return v, notes
}
