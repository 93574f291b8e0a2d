package postgres_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/sink/postgres"
)

// A worker whose handlers write to PostgreSQL inside the fenced unit: the
// handler's statements, the fence check and the new NextOffset commit in
// one transaction. (Compile-only: it needs a database and a broker.)
func Example() {
	ctx := context.Background()
	s, err := postgres.Open(ctx, postgres.Config{DSN: "postgres://app@127.0.0.1:5432/app"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	w, err := consumer.New(ctx, consumer.Config[pgx.Tx]{
		Brokers: []string{"127.0.0.1:9092"},
		Group:   "ledger",
		Topic:   "postings",
		Sink:    s,
		Handlers: map[string]consumer.Handler[pgx.Tx]{
			"post": func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
				// Several statements per command: pipeline them.
				var b pgx.Batch
				b.Queue(`INSERT INTO postings (id, body) VALUES ($1, $2)`, cmd.Key, cmd.Payload)
				b.Queue(`UPDATE accounts SET version = version + 1 WHERE id = $1`, cmd.Key)
				return tx.SendBatch(ctx, &b).Close()
			},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	// … run until shutdown.
}
