package fencehttp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// TokenHeader is the HTTP header that carries the tenure's token: the
// token's binary encoding (epochs.Token.MarshalBinary, the codec of
// epochs.HeaderKey) in unpadded base64url. It is epochs.HeaderKey,
// canonicalized.
const TokenHeader = "Workrouter-Token"

// KeyHeader is the HTTP header that carries the idempotency key, as the
// IETF draft "The Idempotency-Key HTTP Header Field" names it.
const KeyHeader = "Idempotency-Key"

// ReplayedHeader is set to "true" on a response the [Guard] answers from
// the result it recorded for the key, without running the handler.
const ReplayedHeader = "Idempotent-Replayed"

// MaxKeyLen is the longest idempotency key a [Guard] accepts, in bytes of
// the header's value.
const MaxKeyLen = 512

// Sentinel errors; match them with errors.Is.
var (
	// ErrFenced is matched by a [*FencedError]: the resource has seen a
	// newer token for the scope and refused the request.
	ErrFenced = errors.New("fencehttp: fenced by the resource")
	// ErrNoFence is matched by the error of a [Transport] asked to send a
	// request whose context carries no [Fence] (see [WithFence]): it
	// refuses to send an unfenced request.
	ErrNoFence = errors.New("fencehttp: the request's context carries no fence")
	// ErrInvalidFence is matched by the error for a [Fence] that cannot
	// be sent (an invalid token, an empty or oversized key), and by a
	// [*ProblemError] of the server's 400 and 428 answers.
	ErrInvalidFence = errors.New("fencehttp: invalid fence")
	// ErrConfig is matched by the error of [New] for an invalid [Config].
	ErrConfig = errors.New("fencehttp: invalid config")
)

// Fence is what a fenced call carries: the tenure's token and the call's
// idempotency key. Two requests with the same Token scope group and Key
// are the same call: a [Guard] runs it once and answers the other with
// the first result.
type Fence struct {
	Token epochs.Token
	Key   string
}

// CommandFence returns the fence of a call made for cmd: cmd's tenure
// token, and a key that depends on the command alone, so that every
// attempt at the same record (a retried batch, the next tenure after a
// takeover) sends the same one. The key is "id:" and the command's ID
// when it has one (every command package router sends does); otherwise
// "pos:" and the record's position, topic ID (or topic name when the
// broker has none), partition and offset. A handler that makes more than
// one call per command gives each its own key with [Fence.Sub].
func CommandFence(cmd consumer.Command) Fence {
	if cmd.ID != "" {
		return Fence{Token: cmd.Token, Key: "id:" + cmd.ID}
	}
	log := cmd.TopicID
	if log == "" {
		log = cmd.Token.Topic
	}
	return Fence{Token: cmd.Token, Key: "pos:" + log + "/" + strconv.FormatInt(int64(cmd.Token.Partition), 10) + "/" + strconv.FormatInt(cmd.Offset, 10)}
}

// Sub returns f with the key of one of several calls made for the same
// command: f's key, "/" and name ("capture", "refund").
func (f Fence) Sub(name string) Fence {
	f.Key += "/" + name
	return f
}

// Validate reports whether f can be sent: a valid token and a key of 1
// to [MaxKeyLen] bytes once encoded. The error matches [ErrInvalidFence].
func (f Fence) Validate() error {
	if err := f.Token.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidFence, err)
	}
	if f.Key == "" {
		return fmt.Errorf("%w: empty idempotency key", ErrInvalidFence)
	}
	if n := len(encodeKey(f.Key)); n > MaxKeyLen {
		return fmt.Errorf("%w: idempotency key of %d bytes encoded, longer than %d", ErrInvalidFence, n, MaxKeyLen)
	}
	return nil
}

// SetHeaders validates f and sets its [TokenHeader] and [KeyHeader] on h.
// The key is sent as is if it is printable ASCII without "%", and
// percent-encoded otherwise, so that any command ID is a valid header
// value; a Guard uses the header's value as it comes, as the key.
func (f Fence) SetHeaders(h http.Header) error {
	if err := f.Validate(); err != nil {
		return err
	}
	b, err := f.Token.MarshalBinary()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidFence, err)
	}
	h.Set(TokenHeader, base64.RawURLEncoding.EncodeToString(b))
	h.Set(KeyHeader, encodeKey(f.Key))
	return nil
}

// encodeKey returns k as a header value: printable ASCII other than "%"
// as is, every other byte (space, control characters, "%", UTF-8) as
// "%XX". A key made of printable ASCII (every ID package router generates,
// every CommandFence key of such an ID) travels unchanged.
func encodeKey(k string) string {
	n := 0
	for i := 0; i < len(k); i++ {
		if needsEscape(k[i]) {
			n++
		}
	}
	if n == 0 {
		return k
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(k)+2*n)
	for i := 0; i < len(k); i++ {
		if c := k[i]; needsEscape(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

func needsEscape(c byte) bool { return c <= ' ' || c >= 0x7f || c == '%' }

type fenceKey struct{}

// WithFence returns a copy of ctx that carries f, for [Transport] to send
// with the requests made with it.
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the fence ctx carries: the one [WithFence] put there,
// or, in a handler behind a [Guard], the request's: its token, and its
// key as the [KeyHeader] carried it (the client's key itself when that is
// printable ASCII without "%", see [Fence.SetHeaders]).
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// Transport is an http.RoundTripper that sends, with each request, the
// [Fence] of the request's context in the [TokenHeader] and [KeyHeader]
// headers, through Base (http.DefaultTransport if nil). A request whose
// context has no fence fails with [ErrNoFence] and is not sent; an
// invalid fence fails with [ErrInvalidFence]. As the RoundTripper
// contract asks, it does not interpret responses: pass them to
// [CheckResponse]. It may be used from any goroutine.
type Transport struct {
	Base http.RoundTripper
}

// RoundTrip sends req with its context's fence.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	f, ok := FenceFrom(req.Context())
	if !ok {
		closeBody(req)
		return nil, fmt.Errorf("%w: %s %s", ErrNoFence, req.Method, req.URL.Redacted())
	}
	out := req.Clone(req.Context())
	if err := f.SetHeaders(out.Header); err != nil {
		closeBody(req)
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(out)
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// ProblemContentType is the media type of the Guard's refusals (RFC 9457
// problem details).
const ProblemContentType = "application/problem+json"

// The problem types of the Guard's refusals, in the "type" member of their
// body.
const (
	// ProblemFenced: 409 Conflict, the token is older than the scope's
	// stored one, or of the same epoch and another member, or at or
	// below the floor of a scope an operator's reset pinned. The body's
	// "stored" and "presented" members are the tokens, and "floor" the
	// pinned scope's floor (absent if the scope is not pinned).
	ProblemFenced = "urn:workrouter:problem:fenced"
	// ProblemFenceRequired: 428 Precondition Required, the request has no
	// token or no idempotency key.
	ProblemFenceRequired = "urn:workrouter:problem:fence-required"
	// ProblemInvalidFence: 400 Bad Request, the token or the key is
	// malformed.
	ProblemInvalidFence = "urn:workrouter:problem:invalid-fence"
	// ProblemUnavailable: 503 Service Unavailable, the store failed; the
	// request may be retried with the same key.
	ProblemUnavailable = "urn:workrouter:problem:store-unavailable"
)

// Problem is the JSON body of the Guard's refusals (RFC 9457 problem
// details, with the tokens of a fenced request as extension members).
type Problem struct {
	Type      string     `json:"type"`
	Title     string     `json:"title"`
	Status    int        `json:"status"`
	Detail    string     `json:"detail,omitempty"`
	Stored    *TokenJSON `json:"stored,omitempty"`
	Presented *TokenJSON `json:"presented,omitempty"`
	// Floor, in a [ProblemFenced] body, is the scope's floor when the
	// scope is pinned by a reset ([ScopeState.Pinned]); absent otherwise.
	Floor *int32 `json:"floor,omitempty"`
}

// TokenJSON is a token in a [Problem] body.
type TokenJSON struct {
	Group     string `json:"group"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Epoch     int32  `json:"epoch"`
	Member    string `json:"member"`
}

func tokenJSON(t epochs.Token) *TokenJSON {
	return &TokenJSON{Group: t.Group, Topic: t.Topic, Partition: t.Partition, Epoch: t.Epoch, Member: t.Member}
}

func (j *TokenJSON) token() epochs.Token {
	if j == nil {
		return epochs.Token{}
	}
	return epochs.Token{Group: j.Group, Topic: j.Topic, Partition: j.Partition, Epoch: j.Epoch, Member: j.Member}
}

// FencedError is a request the resource refused because it has seen a
// newer token for the scope, or because an operator's reset pinned the
// scope to its holder: Stored is the token the resource holds, Presented
// the request's; Pinned reports the pin ([ScopeState.Pinned]), and Floor
// is then the scope's floor (only the stored token and epochs above it
// are admitted). It matches [ErrFenced] and
// [sink.ErrFenced]: the caller's tenure is over, as when its own sink
// refuses it, and a consumer handler that returns it stops the partition
// instead of retrying the command or dead-lettering it.
type FencedError struct {
	Stored    epochs.Token
	Presented epochs.Token
	Pinned    bool
	// Floor is the scope's floor when Pinned (NoFloor from a store that
	// reports no pin).
	Floor int32
}

// Error describes the refusal.
func (e *FencedError) Error() string {
	msg := fmt.Sprintf("fencehttp: fenced by the resource for %s: presented epoch %d (member %q), stored epoch %d (member %q)",
		e.Presented.Scope(), e.Presented.Epoch, e.Presented.Member, e.Stored.Epoch, e.Stored.Member)
	if e.Pinned {
		msg += fmt.Sprintf("; the scope was reset and admits only the stored token and epochs above %d", e.Floor)
	}
	return msg
}

// Is reports whether target is [ErrFenced] or [sink.ErrFenced].
func (e *FencedError) Is(target error) bool { return target == ErrFenced || target == sink.ErrFenced }

// ProblemError is another refusal of the Guard: 428 and 400 (matching
// [ErrInvalidFence]) or 503 (the store failed; retry with the same key).
type ProblemError struct {
	Problem Problem
}

// Error describes the refusal.
func (e *ProblemError) Error() string {
	return fmt.Sprintf("fencehttp: %d %s: %s", e.Problem.Status, e.Problem.Title, e.Problem.Detail)
}

// Is reports whether target is [ErrInvalidFence], for a 400 or 428.
func (e *ProblemError) Is(target error) bool {
	return target == ErrInvalidFence && (e.Problem.Type == ProblemInvalidFence || e.Problem.Type == ProblemFenceRequired)
}

// maxProblemBody bounds how much of a response body CheckResponse reads.
const maxProblemBody = 64 << 10

// CheckResponse returns the refusal resp carries if it is one of a
// Guard's (a problem body of [ProblemContentType] with one of the
// Problem* types): a [*FencedError] for 409 (matching [ErrFenced] and
// sink.ErrFenced), a [*ProblemError] otherwise. For any other response it
// returns nil and leaves resp as it was. It reads the body of a refusal
// and puts it back, so that resp.Body may still be read and must still be
// closed.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode < 400 {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != ProblemContentType {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemBody))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
	if err != nil {
		return nil
	}
	var p Problem
	if json.Unmarshal(body, &p) != nil {
		return nil
	}
	switch p.Type {
	case ProblemFenced:
		fe := &FencedError{Stored: p.Stored.token(), Presented: p.Presented.token(), Floor: NoFloor}
		if p.Floor != nil {
			fe.Pinned, fe.Floor = true, *p.Floor
		}
		return fe
	case ProblemFenceRequired, ProblemInvalidFence, ProblemUnavailable:
		return &ProblemError{Problem: p}
	}
	return nil
}
