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
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
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

// ErrBadRequest is matched by the error of [Record] for a body that is not
// a valid [Request], or a request without a fence.
var ErrBadRequest = errors.New("payments: bad charge request")

// Record records the charge body asks for through tx, the transaction of
// the fenced request whose context ctx is (sqlstore.TxFrom), with the
// request's idempotency key and token (fencehttp.FenceFrom).
func Record(ctx context.Context, tx *sqlstore.Tx, body io.Reader) error {
	f, ok := fencehttp.FenceFrom(ctx)
	var c Request
	if err := json.NewDecoder(body).Decode(&c); err != nil || !ok || tx == nil || c.Account == "" || c.Cents <= 0 {
		return fmt.Errorf("%w: want {account, cents > 0} in a fenced request", ErrBadRequest)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO charges (idem_key, account, cents, epoch, member)
		VALUES ($1, $2, $3, $4, $5)`, f.Key, c.Account, c.Cents, f.Token.Epoch, f.Token.Member)
	return err
}

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
