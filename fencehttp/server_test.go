package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/fencehttp/memstore"
)

func fencedPost(t *testing.T, client *http.Client, url string, f fencehttp.Fence) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(fencehttp.WithFence(context.Background(), f), http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp, fencehttp.CheckResponse(resp)
}

// brokenStore breaks the Store contract: no unit, no result, no error.
type brokenStore struct{}

func (brokenStore) Begin(context.Context, epochs.Token, string) (fencehttp.Unit, *fencehttp.Result, error) {
	return nil, nil, nil
}

// TestGuardStoreFailureIs503: a store failure is answered 503, never 409
// (an unknown outcome is not a fence), and counted.
func TestGuardStoreFailureIs503(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := fencehttp.New(fencehttp.Config{Store: brokenStore{}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the handler ran") })))
	defer srv.Close()
	resp, err := fencedPost(t, &http.Client{Transport: &fencehttp.Transport{}}, srv.URL, fencehttp.Fence{Token: tok, Key: "k"})
	var pe *fencehttp.ProblemError
	if resp.StatusCode != http.StatusServiceUnavailable || !errors.As(err, &pe) || pe.Problem.Type != fencehttp.ProblemUnavailable || errors.Is(err, fencehttp.ErrFenced) {
		t.Fatalf("got %d %v, want 503 %s", resp.StatusCode, err, fencehttp.ProblemUnavailable)
	}
	if n, err := testutil.GatherAndCount(reg, "workrouter_fencehttp_requests_total"); err != nil || n != 6 {
		t.Fatalf("series: %d, %v; want the 6 outcomes", n, err)
	}
}

// TestGuardPanicAborts: a handler that panics aborts its unit: the key is
// released, so a retry runs the handler again, and the token stays stored.
func TestGuardPanicAborts(t *testing.T) {
	store := memstore.New()
	g, err := fencehttp.New(fencehttp.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		runs++
		if runs == 1 {
			panic(http.ErrAbortHandler)
		}
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	client := &http.Client{Transport: &fencehttp.Transport{}}
	req, _ := http.NewRequestWithContext(fencehttp.WithFence(context.Background(), fencehttp.Fence{Token: tok, Key: "k"}), http.MethodPost, srv.URL, nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the panicking handler's request answered %d", resp.StatusCode)
	}
	if store.Token(tok.Scope()) != tok {
		t.Fatalf("the token was not kept after the panic: %v", store.Token(tok.Scope()))
	}
	resp, err := fencedPost(t, client, srv.URL, fencehttp.Fence{Token: tok, Key: "k"})
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get(fencehttp.ReplayedHeader) != "" || runs != 2 {
		t.Fatalf("retry after the panic: %d %v, handler runs %d; want 201 from a second run", resp.StatusCode, err, runs)
	}
}
