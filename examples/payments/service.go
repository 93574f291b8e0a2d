package payments

import (
	"context"
	"database/sql"
	"encoding/json"
	"net/http"

	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
)

// Service returns the payments service: POST /charges behind a Guard whose
// store is the service's own database, so the token's check and the charge
// commit together. cfg's Store is set here.
func Service(ctx context.Context, db *sql.DB, dialect sqlstore.Dialect, cfg fencehttp.Config) (http.Handler, error) {
	store, err := sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: dialect})
	if err != nil {
		return nil, err
	}
	cfg.Store = store
	guard, err := fencehttp.New(cfg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", guard.Wrap(http.HandlerFunc(charge)))
	return mux, nil
}

// charge records one charge through the request's transaction: the one
// in which the Guard checked the token and claimed the idempotency key.
func charge(w http.ResponseWriter, r *http.Request) {
	var c Request
	if err := json.NewDecoder(r.Body).Decode(&c); err != nil || c.Account == "" || c.Cents <= 0 {
		http.Error(w, "want {account, cents > 0}", http.StatusBadRequest)
		return
	}
	f, _ := fencehttp.FenceFrom(r.Context())
	if _, err := sqlstore.Tx(r.Context()).ExecContext(r.Context(), `INSERT INTO charges (idem_key, account, cents, epoch, member)
		VALUES ($1, $2, $3, $4, $5)`, f.Key, c.Account, c.Cents, f.Token.Epoch, f.Token.Member); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError) // 5xx: rolled back, the key released
		return
	}
	w.WriteHeader(http.StatusCreated)
}
