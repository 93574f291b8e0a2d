package ledger_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/examples/internal/testenv"
	"github.com/workrouter/workrouter/examples/ledger"
)

// TestSetupPostgresConcurrently: workers that start together (a
// Deployment's replicas) set the tables up at once, on a fresh schema;
// every setup succeeds. Without the setups taking turns, PostgreSQL fails
// one of two concurrent CREATE TABLE IF NOT EXISTS with a unique
// violation (seen when three workers started at once).
func TestSetupPostgresConcurrently(t *testing.T) {
	dsn, _ := testenv.Postgres(t)
	const workers = 6
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			pool, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				errs <- err
				return
			}
			defer pool.Close()
			errs <- ledger.SetupPostgres(context.Background(), pool)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("SetupPostgres: %v", err)
		}
	}
}
