// Package payments is the worked pair of docs/fenced-resources.md: a tiny
// payments HTTP service that checks the caller's fencing token itself
// (Service: a fencehttp.Guard whose store is the service's own database),
// and the handler of a workrouter worker that calls it for each "charge"
// command (Charge). The service records each charge in the transaction
// that checked the token, so a worker paused past its session timeout,
// whose partition another worker has taken since, is refused with 409
// Conflict, and each command is charged once even when two tenures send
// it (the idempotency key is the command's).
//
// cmd/internal/fencedcall runs the pair as processes: a worker frozen with
// SIGSTOP, another taking over, the late request refused, every command
// charged exactly once by the service's own rows.
package payments

import (
	"context"
	"database/sql"
	"errors"
)

// Topic is the topic of charge commands.
const Topic = "payments"

// CommandType is the type of a charge command. Its payload is a [Request]
// in JSON.
const CommandType = "charge"

// Request is a charge: an account and an amount in cents.
type Request struct {
	Account string `json:"account"`
	Cents   int64  `json:"cents"`
}

// ErrNotCharged is matched by the error of the Charge handler when the
// service answered neither 201 nor a fencing refusal.
var ErrNotCharged = errors.New("payments: not charged")

// Setup creates the service's table of charges if it does not exist: one
// row per charge made, with the idempotency key and the token of the
// request that made it. The key is not unique on purpose: a command
// charged twice would show as two rows (see [ChargesPerKey]).
func Setup(ctx context.Context, db *sql.DB) error {
	_, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS charges (
		idem_key TEXT NOT NULL,
		account  TEXT NOT NULL,
		cents    BIGINT NOT NULL,
		epoch    INTEGER NOT NULL,
		member   TEXT NOT NULL)`)
	return err
}

// ChargesPerKey returns how many charges the service's database holds for
// each idempotency key.
func ChargesPerKey(ctx context.Context, db *sql.DB) (map[string]int, error) {
	rows, err := db.QueryContext(ctx, `SELECT idem_key, count(*) FROM charges GROUP BY idem_key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		out[k] = n
	}
	return out, rows.Err()
}
