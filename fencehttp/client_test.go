package fencehttp_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/envelope"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
	"github.com/workrouter/workrouter/sink"
)

var tok = epochs.Token{Group: "payers", Topic: "payments", Partition: 3, Epoch: 5, Member: "m-5"}

// TestCommandFenceKeys: the key depends on the command alone (its ID, or
// its position in its log), never on the tenure, so that every attempt at
// one record sends the same key.
func TestCommandFenceKeys(t *testing.T) {
	withID := consumer.Command{Command: envelope.Command{ID: "charge-42"}, Offset: 9, Token: tok, TopicID: "T1"}
	if got := fencehttp.CommandFence(withID); got.Key != "id:charge-42" || got.Token != tok {
		t.Fatalf("with ID: %+v", got)
	}
	next := withID
	next.Token.Epoch, next.Token.Member = 6, "m-6"
	if fencehttp.CommandFence(next).Key != fencehttp.CommandFence(withID).Key {
		t.Fatal("the next tenure's key for the same command differs")
	}
	noID := consumer.Command{Offset: 9, Token: tok, TopicID: "T1"}
	if got := fencehttp.CommandFence(noID).Key; got != "pos:T1/3/9" {
		t.Fatalf("without ID: %q", got)
	}
	noID.TopicID = ""
	if got := fencehttp.CommandFence(noID).Key; got != "pos:payments/3/9" {
		t.Fatalf("without ID nor topic ID: %q", got)
	}
	if got := fencehttp.CommandFence(withID).Sub("refund").Key; got != "id:charge-42/refund" {
		t.Fatalf("Sub: %q", got)
	}
}

// TestTransportSetsHeaders: the Transport sends the token (decodable with
// the epochs codec) and the key (printable ASCII as is, other bytes
// percent-encoded, the same on every send).
func TestTransportSetsHeaders(t *testing.T) {
	var got []http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = append(got, r.Header.Clone()) }))
	defer srv.Close()
	client := &http.Client{Transport: &fencehttp.Transport{}}
	for _, key := range []string{"id:charge-42", "id:commande é 100%", "id:commande é 100%"} {
		ctx := fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: tok, Key: key})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	b, err := base64.RawURLEncoding.DecodeString(got[0].Get(fencehttp.TokenHeader))
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := epochs.FromHeader(b); err != nil || dec != tok {
		t.Fatalf("token header decodes to %+v, %v", dec, err)
	}
	if k := got[0].Get(fencehttp.KeyHeader); k != "id:charge-42" {
		t.Fatalf("ASCII key sent as %q", k)
	}
	if k := got[1].Get(fencehttp.KeyHeader); k != "id:commande%20%C3%A9%20100%25" || got[2].Get(fencehttp.KeyHeader) != k {
		t.Fatalf("non-ASCII key sent as %q then %q", k, got[2].Get(fencehttp.KeyHeader))
	}
	// Invalid fences are not sent.
	for _, f := range []fencehttp.Fence{{Token: tok}, {Key: "k"}, {Token: tok, Key: strings.Repeat("é", fencehttp.MaxKeyLen)}} {
		req, _ := http.NewRequestWithContext(fencehttp.WithFence(context.Background(), f), http.MethodPost, srv.URL, nil)
		if _, err := client.Do(req); !errors.Is(err, fencehttp.ErrInvalidFence) {
			t.Errorf("fence %+v: %v, want ErrInvalidFence", f, err)
		}
	}
	if len(got) != 3 {
		t.Fatalf("the server saw %d requests, want 3", len(got))
	}
}

// TestCheckResponseLeavesOtherResponses: a response that is not a Guard's
// refusal is left alone, body included.
func TestCheckResponseLeavesOtherResponses(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"type":"` + fencehttp.ProblemFenced + `"}`))
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := fencehttp.CheckResponse(resp); err != nil {
		t.Fatalf("a 409 that is not a problem body: %v", err)
	}
}

func TestNewRefusesNoStore(t *testing.T) {
	if _, err := fencehttp.New(fencehttp.Config{}); !errors.Is(err, fencehttp.ErrConfig) {
		t.Fatalf("New without a store: %v", err)
	}
}

// ExampleGuard: the two halves in one process; the older tenure's call is
// refused with an error that matches sink.ErrFenced.
func ExampleGuard() {
	guard, _ := fencehttp.New(fencehttp.Config{Store: memstore.New()})
	srv := httptest.NewServer(guard.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	client := &http.Client{Transport: &fencehttp.Transport{}}
	call := func(epoch int32, member, key string) {
		t := epochs.Token{Group: "payers", Topic: "payments", Partition: 0, Epoch: epoch, Member: member}
		ctx := fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: t, Key: key})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		err = fencehttp.CheckResponse(resp)
		fmt.Println(resp.StatusCode, resp.Header.Get(fencehttp.ReplayedHeader) == "true", errors.Is(err, sink.ErrFenced))
	}
	call(1, "a", "id:c1") // first tenure
	call(2, "b", "id:c1") // the next tenure retries the same command: the first result
	call(1, "a", "id:c2") // the first tenure, late: refused
	// Output:
	// 201 false false
	// 201 true false
	// 409 false true
}
