package fencehttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/workrouter/workrouter/epochs"
)

// Result is a handler's response as a [Store] records it under an
// idempotency key: a duplicate request is answered with it.
type Result struct {
	Status int
	Header http.Header
	Body   []byte
}

// Store keeps, per scope, the highest token a [Guard] has seen and, per
// group and idempotency key, the first result. It is what the Guard
// consumes; packages fencehttp/sqlstore and fencehttp/memstore implement
// it, and fencehttp/storetest is the suite every implementation passes.
type Store interface {
	// Begin opens the unit of one request made under tok with key, in
	// which, atomically with what the handler writes through the unit:
	//
	//   - if the scope's state does not admit tok (ScopeState.Admits:
	//     epochs.Token.CanClaim against the stored token, and the pin of
	//     an operator's reset), it returns the state's Refusal, a
	//     *FencedError (matching ErrFenced) naming the stored token, and
	//     changes nothing;
	//   - otherwise it stores tok as the scope's token, which stays
	//     stored even if the unit is aborted;
	//   - if a result is recorded under (tok.Group, key), it returns it
	//     (and a nil Unit): the request is a duplicate;
	//   - otherwise it returns the open Unit, in which it has claimed key:
	//     a concurrent request with the same key waits for the unit's end
	//     and is then a duplicate (if committed) or not (if aborted).
	//
	// A unit holds the scope until it ends: requests of one scope run one
	// at a time. Any other error means nothing was stored. Begin may be
	// called from any goroutine.
	Begin(ctx context.Context, tok epochs.Token, key string) (Unit, *Result, error)
}

// Unit is one request's open unit of a [Store]. It is used by the
// request's goroutine only, and ended by exactly one Commit or Abort.
type Unit interface {
	// Context returns ctx with what the handler needs to write through
	// the unit (sqlstore's transaction, see sqlstore.TxFrom).
	Context(ctx context.Context) context.Context
	// Commit records res under the unit's key and makes the token, the
	// key and the handler's writes through the unit durable, together.
	// On an error none of them is (except the token, if stored before).
	// A store whose unit can lose its hold of the scope (a lease that
	// expired, redisstore) checks the token again in the commit and
	// returns a *FencedError when a newer one was stored since Begin.
	Commit(ctx context.Context, res Result) error
	// Abort discards the handler's writes and releases the key, so that
	// a retry runs the handler again; the token stays stored.
	Abort(ctx context.Context) error
}

// Config configures a [Guard].
type Config struct {
	// Store keeps the tokens and the results. Required.
	Store Store
	// Logger receives a line for every refusal (Info), aborted request
	// (Info), store failure (Warn) and duplicate answered from its first
	// result (Debug); nil logs nothing.
	Logger *slog.Logger
	// Registerer, if set, receives the Guard's metric,
	// workrouter_fencehttp_requests_total{outcome}: OutcomeApplied,
	// OutcomeAborted (the handler answered 5xx), OutcomeReplayed,
	// OutcomeFenced, OutcomeInvalid (400, 428) and OutcomeUnavailable (the
	// store failed).
	Registerer prometheus.Registerer
}

// Guard is the server half: net/http middleware that fences every request
// through its [Store] (see the package documentation). Its methods may be
// called from any goroutine.
type Guard struct {
	store    Store
	log      *slog.Logger
	outcomes *prometheus.CounterVec
}

// The outcomes a Guard counts: the values of the outcome label of its
// metric (Config.Registerer).
const (
	OutcomeApplied     = "applied"
	OutcomeAborted     = "aborted"
	OutcomeReplayed    = "replayed"
	OutcomeFenced      = "fenced"
	OutcomeInvalid     = "invalid"
	OutcomeUnavailable = "unavailable"
)

// New returns a Guard over cfg.Store. It fails with [ErrConfig] without a
// store, and with the Registerer's error if the metric cannot be
// registered.
func New(cfg Config) (*Guard, error) {
	if cfg.Store == nil {
		return nil, fmt.Errorf("%w: Store is required", ErrConfig)
	}
	g := &Guard{store: cfg.Store, log: cfg.Logger}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "workrouter_fencehttp_requests_total",
		Help: "Requests a fencehttp Guard decided, by outcome.",
	}, []string{"outcome"})
	for _, o := range []string{OutcomeApplied, OutcomeAborted, OutcomeReplayed, OutcomeFenced, OutcomeInvalid, OutcomeUnavailable} {
		g.outcomes.WithLabelValues(o)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.outcomes); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// Wrap returns next behind the Guard. For each request:
//
//   - without a [TokenHeader] or a [KeyHeader] it answers 428, with a
//     malformed one 400 ([ProblemFenceRequired], [ProblemInvalidFence]);
//   - it opens a unit of the store; a refused token is answered 409
//     ([ProblemFenced], with the stored and presented tokens), a
//     duplicate with the recorded result and [ReplayedHeader] "true", a
//     store failure 503 ([ProblemUnavailable]);
//   - otherwise it runs next with the unit's context (FenceFrom gives the
//     request's fence; sqlstore.TxFrom its transaction) and a buffered
//     response; a status below 500 is committed with the handler's
//     writes and recorded under the key, then sent; a status of 500 or
//     more (or a panic) aborts the unit: the writes are discarded, the
//     key is released and the response is sent (the panic goes on).
//
// A commit that fails is answered 503, one the store refuses because a
// newer token was stored since Begin (a *FencedError) 409. next must not hijack the
// connection or rely on flushing: its response is sent once it returns.
func (g *Guard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serve(w, r, next)
	})
}

func (g *Guard) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	rawTok, rawKey := r.Header.Get(TokenHeader), r.Header.Get(KeyHeader)
	if rawTok == "" || rawKey == "" {
		g.refuse(w, r, OutcomeInvalid, Problem{Type: ProblemFenceRequired, Title: "fence required", Status: http.StatusPreconditionRequired,
			Detail: "a fenced request carries the " + TokenHeader + " and " + KeyHeader + " headers"})
		return
	}
	tok, err := decodeToken(rawTok)
	if err == nil && len(rawKey) > MaxKeyLen {
		err = fmt.Errorf("%w: idempotency key of %d bytes, longer than %d", ErrInvalidFence, len(rawKey), MaxKeyLen)
	}
	if err != nil {
		g.refuse(w, r, OutcomeInvalid, Problem{Type: ProblemInvalidFence, Title: "invalid fence", Status: http.StatusBadRequest, Detail: err.Error()})
		return
	}
	unit, recorded, err := g.store.Begin(ctx, tok, rawKey)
	var fe *FencedError
	switch {
	case errors.As(err, &fe):
		g.fenced(w, r, fe, rawKey, "begin")
		return
	case err != nil:
		g.unavailable(w, r, "begin", err)
		return
	case recorded != nil:
		g.log.DebugContext(ctx, "fencehttp: duplicate answered with its first result", "scope", tok.Scope().String(),
			"token", tok.String(), "key", rawKey, "status", recorded.Status)
		g.outcomes.WithLabelValues(OutcomeReplayed).Inc()
		writeResult(w, *recorded, true)
		return
	case unit == nil:
		g.unavailable(w, r, "begin", errNoUnit)
		return
	}
	buf := &bufferedResponse{header: http.Header{}}
	ended := false
	defer func() {
		if !ended { // next panicked
			_ = unit.Abort(context.WithoutCancel(ctx))
			g.outcomes.WithLabelValues(OutcomeAborted).Inc()
		}
	}()
	hctx := WithFence(unit.Context(ctx), Fence{Token: tok, Key: rawKey})
	next.ServeHTTP(buf, r.WithContext(hctx))
	res := buf.result()
	ended = true
	if res.Status >= 500 {
		if err := unit.Abort(context.WithoutCancel(ctx)); err != nil {
			g.log.WarnContext(ctx, "fencehttp: abort failed", "scope", tok.Scope().String(), "key", rawKey, "err", err)
		} else {
			g.log.InfoContext(ctx, "fencehttp: the handler answered 5xx: its writes rolled back, the key released",
				"scope", tok.Scope().String(), "key", rawKey, "status", res.Status)
		}
		g.outcomes.WithLabelValues(OutcomeAborted).Inc()
		writeResult(w, res, false)
		return
	}
	if err := unit.Commit(context.WithoutCancel(ctx), res); errors.As(err, &fe) {
		g.fenced(w, r, fe, rawKey, "commit")
		return
	} else if err != nil {
		g.unavailable(w, r, "commit", err)
		return
	}
	g.outcomes.WithLabelValues(OutcomeApplied).Inc()
	writeResult(w, res, false)
}

// errNoUnit is a Store's broken promise: Begin returned neither a unit,
// a result nor an error.
var errNoUnit = errors.New("fencehttp: the store's Begin returned no unit, no result and no error")

// fenced answers a refusal of the store, at Begin or (for a store whose
// unit can lose its hold of the scope) at Commit.
func (g *Guard) fenced(w http.ResponseWriter, r *http.Request, fe *FencedError, key, at string) {
	p := Problem{Type: ProblemFenced, Title: "stale fencing token", Status: http.StatusConflict,
		Detail: fe.Error(), Stored: tokenJSON(fe.Stored), Presented: tokenJSON(fe.Presented)}
	attrs := []any{"at", at, "scope", fe.Presented.Scope().String(), "presented", fe.Presented.String(),
		"stored", fe.Stored.String(), "key", key, "method", r.Method, "path", r.URL.Path}
	if fe.Pinned {
		floor := fe.Floor
		p.Floor = &floor
		attrs = append(attrs, "floor", floor)
	}
	g.log.InfoContext(r.Context(), "fencehttp: stale token refused", attrs...)
	g.refuse(w, r, OutcomeFenced, p)
}

func (g *Guard) unavailable(w http.ResponseWriter, r *http.Request, op string, err error) {
	g.log.WarnContext(r.Context(), "fencehttp: store failed", "op", op, "method", r.Method, "path", r.URL.Path, "err", err)
	g.refuse(w, r, OutcomeUnavailable, Problem{Type: ProblemUnavailable, Title: "fence store unavailable", Status: http.StatusServiceUnavailable,
		Detail: op + ": " + err.Error()})
}

func (g *Guard) refuse(w http.ResponseWriter, _ *http.Request, outcome string, p Problem) {
	g.outcomes.WithLabelValues(outcome).Inc()
	body, _ := json.Marshal(p)
	w.Header().Set("Content-Type", ProblemContentType)
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// decodeToken decodes a TokenHeader value; the error matches
// ErrInvalidFence.
func decodeToken(v string) (epochs.Token, error) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return epochs.Token{}, fmt.Errorf("%w: %s is not unpadded base64url: %w", ErrInvalidFence, TokenHeader, err)
	}
	tok, err := epochs.FromHeader(b)
	if err == nil {
		err = tok.Validate()
	}
	if err != nil {
		return epochs.Token{}, fmt.Errorf("%w: %s: %w", ErrInvalidFence, TokenHeader, err)
	}
	return tok, nil
}

func writeResult(w http.ResponseWriter, res Result, replayed bool) {
	for k, vs := range res.Header {
		w.Header()[k] = append([]string(nil), vs...)
	}
	if replayed {
		w.Header().Set(ReplayedHeader, "true")
	}
	w.WriteHeader(res.Status)
	_, _ = w.Write(res.Body)
}

// bufferedResponse is the handler's ResponseWriter: it keeps the response
// until the unit has ended.
type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) result() Result {
	st := b.status
	if st == 0 {
		st = http.StatusOK
	}
	return Result{Status: st, Header: b.header.Clone(), Body: bytes.Clone(b.body.Bytes())}
}
