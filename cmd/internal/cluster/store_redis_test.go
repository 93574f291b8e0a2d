package cluster

import (
	"strings"
	"testing"
)

func TestCountPostings(t *testing.T) {
	ps := []Posting{
		{Partition: 0, Offset: 1, Epoch: 1, Member: "a", ID: "x"},
		{Partition: 0, Offset: 2, Epoch: 2, Member: "b", ID: "frozen-cmd"},
		{Partition: 1, Offset: 2, Epoch: 2, Member: "b", ID: "y"},
	}
	for _, c := range []struct {
		q    string
		args []any
		want int
	}{
		{`SELECT count(*) FROM ledger_postings`, nil, 3},
		{`SELECT count(*) FROM ledger_postings WHERE part = $1 AND epoch = $2 AND member = $3 AND off >= $4`, []any{int32(0), int32(2), "b", int64(2)}, 1},
		{`SELECT count(*) FROM ledger_postings WHERE part = $1 AND off >= $2 AND off <= $3`, []any{0, 1, 1}, 1},
		{`SELECT count(*) FROM ledger_postings WHERE id = 'frozen-cmd'`, nil, 1},
	} {
		if n, err := countPostings(ps, c.q, c.args...); err != nil || n != c.want {
			t.Errorf("%s %v = %d, %v; want %d", c.q, c.args, n, err, c.want)
		}
	}
	if _, err := countPostings(ps, `SELECT sum(amount) FROM ledger_postings`); err == nil || !strings.Contains(err.Error(), "cannot answer") {
		t.Errorf("an unknown query: %v, want an error naming it", err)
	}
}
