package payments_test

import (
	"database/sql"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/examples/payments"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/sqlstore"
	"github.com/workrouter/workrouter/sink"
)

// TestChargeAcrossTenures: the worker's handler against the service, one
// command at a time as two tenures would send it: the first charges, the
// next tenure's retry of the same command is answered from the first
// charge, and the old tenure is then refused with an error that stops its
// partition. The service's rows hold one charge.
func TestChargeAcrossTenures(t *testing.T) {
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(t.TempDir(), "payments.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := payments.Setup(t.Context(), db); err != nil {
		t.Fatal(err)
	}
	svc, err := payments.Service(t.Context(), db, sqlstore.SQLite, fencehttp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(svc)
	defer srv.Close()
	charge := payments.Charge[struct{}](&http.Client{Transport: &fencehttp.Transport{}}, srv.URL)

	tok := func(epoch int32, member string) epochs.Token {
		return epochs.Token{Group: "payers", Topic: payments.Topic, Partition: 2, Epoch: epoch, Member: member}
	}
	cmd := func(id string, tk epochs.Token) consumer.Command {
		return consumer.Command{Command: envelope.Command{Key: []byte("acct-1"), Type: payments.CommandType, ID: id,
			Payload: []byte(`{"account":"acct-1","cents":250}`)}, Offset: 7, Token: tk}
	}
	if err := charge(t.Context(), struct{}{}, cmd("c1", tok(3, "a"))); err != nil {
		t.Fatalf("first charge: %v", err)
	}
	if err := charge(t.Context(), struct{}{}, cmd("c1", tok(4, "b"))); err != nil {
		t.Fatalf("the next tenure's retry of the same command: %v", err)
	}
	for _, id := range []string{"c1", "c2"} {
		err := charge(t.Context(), struct{}{}, cmd(id, tok(3, "a")))
		var fe *fencehttp.FencedError
		if !errors.As(err, &fe) || !errors.Is(err, sink.ErrFenced) || fe.Stored != tok(4, "b") {
			t.Fatalf("the old tenure's %s: %v, want a *FencedError naming epoch 4 that matches sink.ErrFenced", id, err)
		}
	}
	got, err := payments.ChargesPerKey(t.Context(), db)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["id:c1"] != 1 {
		t.Fatalf("charges per key: %v, want one for id:c1", got)
	}
}
