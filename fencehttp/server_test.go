package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// commitFencedStore opens a unit whose Commit finds a newer token stored,
// as a store whose unit lost its lease does (redisstore).
type commitFencedStore struct{ newer epochs.Token }

func (s commitFencedStore) Begin(context.Context, epochs.Token, string) (fencehttp.Unit, *fencehttp.Result, error) {
	return commitFencedUnit(s), nil, nil
}

type commitFencedUnit struct{ newer epochs.Token }

func (commitFencedUnit) Context(ctx context.Context) context.Context { return ctx }
func (u commitFencedUnit) Commit(context.Context, fencehttp.Result) error {
	return &fencehttp.FencedError{Stored: u.newer, Presented: tok}
}
func (commitFencedUnit) Abort(context.Context) error { return nil }

// TestGuardCommitFencedIs409: a Commit refused with a *FencedError is
// answered 409 naming both tokens, not 503 and not the handler's answer,
// and counted as fenced.
func TestGuardCommitFencedIs409(t *testing.T) {
	newer := tok
	newer.Epoch, newer.Member = tok.Epoch+1, "other"
	reg := prometheus.NewRegistry()
	g, err := fencehttp.New(fencehttp.Config{Store: commitFencedStore{newer: newer}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	srv := httptest.NewServer(g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		ran = true
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	resp, err := fencedPost(t, &http.Client{Transport: &fencehttp.Transport{}}, srv.URL, fencehttp.Fence{Token: tok, Key: "k"})
	var fe *fencehttp.FencedError
	if !ran || resp.StatusCode != http.StatusConflict || !errors.As(err, &fe) || fe.Stored != newer || fe.Presented != tok {
		t.Fatalf("ran=%v got %d %v, want the handler run and 409 naming stored %v presented %v", ran, resp.StatusCode, err, newer, tok)
	}
	want := `
# HELP workrouter_fencehttp_requests_total Requests a fencehttp Guard decided, by outcome.
# TYPE workrouter_fencehttp_requests_total counter
workrouter_fencehttp_requests_total{outcome="aborted"} 0
workrouter_fencehttp_requests_total{outcome="applied"} 0
workrouter_fencehttp_requests_total{outcome="fenced"} 1
workrouter_fencehttp_requests_total{outcome="invalid"} 0
workrouter_fencehttp_requests_total{outcome="replayed"} 0
workrouter_fencehttp_requests_total{outcome="unavailable"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "workrouter_fencehttp_requests_total"); err != nil {
		t.Fatal(err)
	}
}
