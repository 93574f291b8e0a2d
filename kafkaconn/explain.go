package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The causes Explain names. Each is matched (errors.Is) by the *Error
// that Explain returns for it.
var (
	// ErrAuthFailed: the broker refused the SASL credentials (a wrong
	// username or password, a user without credentials for the
	// mechanism, or a refused token).
	ErrAuthFailed = errors.New("kafkaconn: SASL authentication failed")
	// ErrMechanismUnsupported: the broker does not offer the SASL
	// mechanism asked for.
	ErrMechanismUnsupported = errors.New("kafkaconn: SASL mechanism not enabled on the broker")
	// ErrSASLRequired: the broker closed the connection at the first
	// request of a client without SASL: it requires authentication.
	ErrSASLRequired = errors.New("kafkaconn: the broker requires SASL authentication")
	// ErrUntrustedCertificate: the broker's TLS certificate is not signed
	// by a CA the client trusts, or is not valid for the name dialed.
	ErrUntrustedCertificate = errors.New("kafkaconn: the broker's TLS certificate is not trusted")
	// ErrTLSRequired: a plaintext client reached a listener that expects
	// TLS.
	ErrTLSRequired = errors.New("kafkaconn: the broker expects TLS")
	// ErrNotTLS: a TLS client reached a listener that does not speak TLS.
	ErrNotTLS = errors.New("kafkaconn: the broker does not speak TLS on this port")
)

// Error is a connection failure with its likely cause named: Cause is one
// of the sentinels above (ErrAuthFailed, ErrUntrustedCertificate, …),
// Hint says what to change, and Err is the client's own error. It matches
// both Cause and Err with errors.Is. Its message is one line and holds no
// secret.
type Error struct {
	Cause error
	Hint  string
	Err   error
}

// Error returns "CAUSE: HINT (ERR)", the cause without the "kafkaconn: "
// of its sentinel's message, so that the line reads the same in a
// program's log and in a command's output.
func (e *Error) Error() string {
	msg := strings.TrimPrefix(e.Cause.Error(), "kafkaconn: ")
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	if e.Err != nil {
		msg += " (" + e.Err.Error() + ")"
	}
	return msg
}

// Unwrap returns the cause and the client's error.
func (e *Error) Unwrap() []error { return []error{e.Cause, e.Err} }

// Explain returns err with its likely cause named, as an *Error, for a
// client that connected as c; an err it does not recognize is returned as
// is (nil stays nil). It recognizes refused SASL credentials, a broker
// that requires SASL or TLS the client does not use, an untrusted or
// misnamed certificate, and a TLS client at a plaintext listener (a TLS
// handshake answered in plaintext, or never answered). Safe to call from
// any goroutine.
func (c Config) Explain(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	user := c.Username
	if user == "" {
		user = "(none)"
	}
	authFailed := func() error {
		return &Error{Cause: ErrAuthFailed, Err: err,
			Hint: fmt.Sprintf("the broker refused user %s with %s: check the username and password (or token) and the mechanism", user, c.SASL)}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		recordHdr tls.RecordHeaderError
		firstRead *kgo.ErrFirstReadEOF
		hangUp    *firstReadHangUp
	)
	switch {
	case errors.As(err, &unknownCA):
		return &Error{Cause: ErrUntrustedCertificate, Err: err,
			Hint: "it is not signed by a CA this client trusts: give the broker's CA with --tls-ca (ssl.ca.location)"}
	case errors.As(err, &hostname):
		return &Error{Cause: ErrUntrustedCertificate, Err: err,
			Hint: "it is not valid for the address dialed: dial a name it carries, or set --tls-server-name"}
	case errors.As(err, &invalid):
		return &Error{Cause: ErrUntrustedCertificate, Err: err, Hint: "it is expired or not valid for a server"}
	case errors.As(err, &recordHdr):
		return &Error{Cause: ErrNotTLS, Err: err,
			Hint: "it answered the TLS handshake in plaintext: drop --tls (security.protocol PLAINTEXT or SASL_PLAINTEXT) or dial its TLS port"}
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return authFailed()
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return &Error{Cause: ErrMechanismUnsupported, Err: err,
			Hint: fmt.Sprintf("the broker does not offer %s: choose one it enables with --sasl-mechanism", c.SASL)}
	case errors.As(err, &firstRead), errors.As(err, &hangUp):
		// kgo's guess (or the Probe's): the broker hung up at the first
		// request.
		switch {
		case !c.UsesTLS():
			return &Error{Cause: ErrTLSRequired, Err: err,
				Hint: "it closed the connection at the first request of this plaintext client: add --tls (security.protocol SSL or SASL_SSL)"}
		case c.SASL == NoSASL:
			return &Error{Cause: ErrSASLRequired, Err: err,
				Hint: "it closed the connection at the first request of this client without SASL: give --sasl-mechanism and credentials"}
		default:
			return authFailed()
		}
	case c.SASL != NoSASL && isBareEOF(err):
		// A broker that refuses SASL credentials may just hang up in the
		// middle of the exchange: the client sees nothing but EOF.
		return authFailed()
	case c.UsesTLS() && isHandshakeTimeout(err):
		return &Error{Cause: ErrNotTLS, Err: err,
			Hint: "the TLS handshake got no answer: the port is likely a plaintext listener: drop --tls or dial its TLS port"}
	}
	return err
}

// isBareEOF reports whether err is an EOF with nothing around it that
// says where it came from: what a SASL exchange cut off by the broker
// returns.
func isBareEOF(err error) bool {
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op)
}

// isHandshakeTimeout reports whether err is a dial that timed out; over
// TLS that is most often a handshake nobody answers (see Probe).
func isHandshakeTimeout(err error) bool {
	var hs handshakeTimeout
	return errors.As(err, &hs)
}

// firstReadHangUp marks a read that the Probe saw end in a bare EOF
// before the client had read any response but ApiVersions: the broker
// hung up at the first request of the connection. kgo turns that same
// EOF into an ErrFirstReadEOF for the request that read it, but its
// hook sees the bare EOF, and the other requests of the connection fail
// with a vaguer error.
type firstReadHangUp struct{ err error }

func (h *firstReadHangUp) Error() string {
	return "the broker closed the connection at the first request: " + h.err.Error()
}
func (h *firstReadHangUp) Unwrap() error { return h.err }

// handshakeTimeout marks a connect error that Probe saw: a TCP connection
// that succeeded and a TLS handshake that did not finish.
type handshakeTimeout struct{ err error }

func (h handshakeTimeout) Error() string { return h.err.Error() }
func (h handshakeTimeout) Unwrap() error { return h.err }

// Probe is a franz-go hook that remembers a client's last failed broker
// connection, so that a command whose requests ended with a bare
// "context deadline exceeded" (the client retried until the deadline) can
// still say why. Install it with Opt; read it with Explain. A Probe may be
// used by one client at a time; its methods are safe for concurrent use.
type Probe struct {
	cfg Config

	mu      sync.Mutex
	last    error
	named   error         // the first failure Explain names
	refused chan struct{} // closed when named is set
	readOK  bool          // a response was read: the client talked to a broker
}

// NewProbe returns a Probe for a client that connects as c.
func NewProbe(c Config) *Probe { return &Probe{cfg: c, refused: make(chan struct{})} }

// Refused returns a channel that is closed once a connection failed, while
// being set up, for a cause Explain names (refused credentials, an
// untrusted certificate, a TLS client at a plaintext listener): retrying
// will not fix it, so a caller waiting for the client may give up at once
// instead of at its deadline. (A broker that hangs up on the first request
// of a client without SASL or TLS fails that request at once, and closes
// the channel too.)
func (p *Probe) Refused() <-chan struct{} { return p.refused }

// Opt returns the option that installs the Probe's hook on a client.
func (p *Probe) Opt() kgo.Opt { return kgo.WithHooks(p) }

// OnBrokerConnect records a failed connection. kgo calls it from its
// connection goroutines.
func (p *Probe) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	var netErr net.Error
	if p.cfg.UsesTLS() && (errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()) {
		// The dial timed out. If plain TCP connects at once, it was the
		// TLS handshake that got no answer.
		addr := net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port))
		if conn, derr := net.DialTimeout("tcp", addr, time.Second); derr == nil {
			conn.Close()
			err = handshakeTimeout{err}
		}
	}
	p.record(err)
}

// OnBrokerRead records a response that could not be read because the
// broker hung up at the first request of a connection: a broker that
// requires SASL or TLS the client does not use. kgo's hook sees the bare
// EOF of that read (kgo turns it into an ErrFirstReadEOF only for the
// request that read it, after the hook); the connection's other requests
// fail with a vaguer error ("the broker connection has died"), which
// Explain explains with this one. kgo calls it from its connection
// goroutines.
//
// Only before any response but ApiVersions was read (brokers answer
// ApiVersions before authentication): once the client talked to a
// broker, a connection that dies at its first request is a broker going
// away (a restart), not a misconfiguration.
func (p *Probe) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if err == nil {
		if kmsg.Key(key) != kmsg.ApiVersions {
			p.mu.Lock()
			p.readOK = true
			p.mu.Unlock()
		}
		return
	}
	p.mu.Lock()
	talked := p.readOK
	p.mu.Unlock()
	if talked {
		return
	}
	var firstRead *kgo.ErrFirstReadEOF
	switch {
	case errors.As(err, &firstRead):
		p.record(err)
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		// Compared, not errors.Is: kgo converts exactly the bare EOF.
		p.record(&firstReadHangUp{err})
	}
}

// record remembers err as the last failure, and as the named one if it is
// the first Explain names.
func (p *Probe) record(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if errors.Is(err, context.Canceled) {
		return // the client is closing, or its caller gave up: no news
	}
	p.last = err
	if e, named := errors.AsType[*Error](p.cfg.Explain(err)); named && p.named == nil {
		p.named = e
		close(p.refused)
	}
}

// Last returns the first connection failure whose cause Explain names,
// or else the last failed connection's error, or nil.
func (p *Probe) Last() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.named != nil {
		return p.named
	}
	return p.last
}

// Explain explains err like Config.Explain; if err says no more than that
// a deadline passed (or a connection attempt failed) and the Probe saw a
// connection fail, it explains that failure instead. The result is one
// line and names the cause when it is known.
func (p *Probe) Explain(err error) error {
	if err == nil {
		return nil
	}
	e := p.cfg.Explain(err)
	if _, ok := errors.AsType[*Error](e); ok {
		return e
	}
	if last := p.Last(); last != nil {
		if le, named := errors.AsType[*Error](p.cfg.Explain(last)); named {
			return le
		}
	}
	return e
}
