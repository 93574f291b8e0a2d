package payments

import (
	"context"
	"database/sql"
	"errors"
	"net/http"

	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
)

// Service returns the payments service: POST /charges behind a Guard whose
// store is the service's own database (cfg.Store is set here).
func Service(ctx context.Context, db *sql.DB, dialect sqlstore.Dialect, cfg fencehttp.Config) (http.Handler, error) {
	var err error
	if cfg.Store, err = sqlstore.New(ctx, sqlstore.Config{DB: db, Dialect: dialect}); err != nil {
		return nil, err
	}
	guard, err := fencehttp.New(cfg)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /charges", guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Through the transaction in which the Guard checked the token.
		switch err := Record(r.Context(), sqlstore.TxFrom(r.Context()), r.Body); {
		case errors.Is(err, ErrBadRequest):
			http.Error(w, err.Error(), http.StatusBadRequest) // a result, recorded under the key
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError) // rolled back, key released
		default:
			w.WriteHeader(http.StatusCreated)
		}
	})))
	return mux, nil
}
