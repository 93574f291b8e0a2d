package broker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The SASL front.
//
// kfake authenticates (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512), but on its
// own it speaks SASL only the way franz-go's client does: it advertises
// SaslHandshake v1 alone, answers a successful handshake with no
// mechanism list, rejects SaslHandshake v0 (after which the
// authentication tokens come as raw size-prefixed frames, not wrapped in
// SaslAuthenticate) and answers a wrong password by closing the
// connection without a response. librdkafka (kcat, confluent-kafka)
// requires SaslHandshake v0 in ApiVersions, KafkaJS requires its mechanism
// in the handshake's list, and kafka-python 2.0.2 always uses v0 with raw
// tokens.
//
// kfake's request interception (Cluster.ControlKey) cannot fix this: a
// control function runs before kfake's SASL state machine, is not told
// which connection a request came on, cannot change a response kfake
// builds, and kfake parses every frame as a Kafka request before any
// control function sees it, so raw tokens never reach one. So the front
// sits one layer down, on the connections kfake accepts from the
// listener Start hands it, and translates frames while kfake still does
// the authentication:
//
//   - ApiVersions responses advertise SaslHandshake from v0;
//   - SaslHandshake responses list the enabled mechanisms;
//   - a SaslHandshake v0 request is passed to kfake as v1 (the two
//     versions are encoded alike), and the raw tokens that follow it are
//     wrapped into SaslAuthenticate v0 requests and their responses
//     unwrapped back into raw frames;
//   - when kfake closes a connection whose SaslAuthenticate it has not
//     answered (which is how it refuses credentials), the front answers
//     it with SASL_AUTHENTICATION_FAILED first, as Kafka does, so that
//     the client reports a failed login instead of retrying a lost
//     connection. After a raw v0 token Kafka only closes; so does the
//     front.
//
// Once a connection has authenticated, the front passes its bytes
// through untouched.

// mechanisms are the SASL mechanisms of every user, in the order the
// SaslHandshake response lists them.
var mechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// maxAuthFrame bounds a frame read before the client has authenticated,
// like Kafka's sasl.server.max.receive.size, so that an unauthenticated
// client cannot make the broker allocate an arbitrary size.
const maxAuthFrame = 512 << 10

// authFailWriteTimeout bounds the write of a SASL_AUTHENTICATION_FAILED
// response to a client that does not read it.
const authFailWriteTimeout = 5 * time.Second

// saslFront holds what the connections of one broker share. Its methods may
// be called from any goroutine.
type saslFront struct {
	logger   *slog.Logger
	closing  atomic.Bool  // set by Broker.Close before kfake drops the connections
	failures atomic.Int64 // refused logins
}

// wrap returns the front's view of an accepted connection, for kfake.
func (f *saslFront) wrap(c net.Conn) net.Conn {
	return &saslConn{Conn: c, f: f, pending: make(map[int32]pendingReq)}
}

// failed logs and counts a refused login.
func (f *saslFront) failed(c net.Conn, mech, user string, raw bool) {
	n := f.failures.Add(1)
	f.logger.Warn("SASL authentication failed; connection closed",
		"client", c.RemoteAddr().String(), "mechanism", mech, "user", user,
		"handshake_v0", raw, "failures", n)
}

// pendingReq is a request whose response the front rewrites.
type pendingReq struct {
	key     int16
	version int16
	raw     bool // SaslHandshake v0, or a raw token wrapped by the front
}

// saslConn is one client connection seen through the front. kfake reads it
// from one goroutine at a time and writes it from another; Close may come
// from either.
type saslConn struct {
	net.Conn
	f *saslFront

	// rbuf is the part of the current frame not yet read by kfake;
	// only the reading goroutine touches it.
	rbuf []byte
	// wbuf holds the start of a response frame kfake has not finished
	// writing; only the writing goroutine touches it.
	wbuf []byte

	wmu sync.Mutex // serializes writes to Conn (kfake's and Close's)

	mu       sync.Mutex
	pending  map[int32]pendingReq
	mech     string      // the mechanism of the handshake, once answered
	user     string      // the user the first token names
	steps    int         // authentication round trips still to go
	raw      bool        // tokens come raw (after SaslHandshake v0)
	rawCorr  int32       // the correlation ID the front gives the next raw token
	authing  *pendingReq // a SaslAuthenticate kfake has not answered
	authCorr int32       // its correlation ID
	authed   bool        // authenticated: bytes pass through
	readErr  bool        // the client's side failed or closed

	closeOnce sync.Once
	closeErr  error
}

// Read hands kfake the client's frames, translated.
func (c *saslConn) Read(p []byte) (int, error) {
	if len(c.rbuf) == 0 {
		c.mu.Lock()
		authed := c.authed
		c.mu.Unlock()
		if authed {
			return c.Conn.Read(p)
		}
		frame, err := c.readFrame()
		if err != nil {
			c.mu.Lock()
			c.readErr = true
			c.mu.Unlock()
			return 0, err
		}
		c.rbuf = c.translate(frame)
	}
	n := copy(p, c.rbuf)
	c.rbuf = c.rbuf[n:]
	return n, nil
}

// readFrame reads one size-prefixed frame and returns its body. The bound
// on its size holds only if the client had not authenticated when the size
// came: kfake reads the first request after a login while the login's
// answer is on its way, and the client sends that request only once it has
// the answer, which is after rewrite set authed.
func (c *saslConn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := readFull(c.Conn, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	c.mu.Lock()
	authed := c.authed
	c.mu.Unlock()
	if n > maxAuthFrame && !authed {
		return nil, fmt.Errorf("broker: a frame of %d bytes before SASL authentication (at most %d)", n, maxAuthFrame)
	}
	body := make([]byte, n)
	if _, err := readFull(c.Conn, body); err != nil {
		return nil, err
	}
	return body, nil
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// frame prefixes body with its size.
func frame(body []byte) []byte {
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(len(body)))
	return append(out, body...)
}

// translate returns what kfake reads for a frame the client sent before
// it authenticated.
func (c *saslConn) translate(body []byte) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.authed {
		return frame(body)
	}
	if c.raw {
		// A raw token: wrapped into a SaslAuthenticate v0 request.
		c.noteUser(body)
		corr := c.rawCorr
		c.rawCorr--
		req := kmsg.NewPtrSASLAuthenticateRequest()
		req.SASLAuthBytes = body
		hdr := make([]byte, 0, 10+len(body)+4)
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(kmsg.SASLAuthenticate))
		hdr = binary.BigEndian.AppendUint16(hdr, 0)
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(corr))
		hdr = binary.BigEndian.AppendUint16(hdr, 0xffff) // null client ID
		pr := pendingReq{key: int16(kmsg.SASLAuthenticate), raw: true}
		c.pending[corr] = pr
		c.authing, c.authCorr = &pr, corr
		return frame(req.AppendTo(hdr))
	}
	if len(body) < 8 {
		return frame(body) // kfake drops a frame it cannot parse
	}
	key := int16(binary.BigEndian.Uint16(body[0:2]))
	version := int16(binary.BigEndian.Uint16(body[2:4]))
	corr := int32(binary.BigEndian.Uint32(body[4:8]))
	switch kmsg.Key(key) {
	case kmsg.ApiVersions:
		c.pending[corr] = pendingReq{key: key, version: version}
	case kmsg.SASLHandshake:
		pr := pendingReq{key: key, version: version}
		if version == 0 {
			// v0 and v1 are encoded alike; kfake serves v1.
			pr.raw = true
			binary.BigEndian.PutUint16(body[2:4], 1)
		}
		c.pending[corr] = pr
		c.mech = handshakeMechanism(body)
	case kmsg.SASLAuthenticate:
		pr := pendingReq{key: key, version: version}
		c.pending[corr] = pr
		c.authing, c.authCorr = &pr, corr
		var req kmsg.SASLAuthenticateRequest
		req.SetVersion(version)
		if rest, ok := requestBody(body, req.IsFlexible()); ok && req.ReadFrom(rest) == nil {
			c.noteUser(req.SASLAuthBytes)
		}
	default:
		// kfake closes the connection: nothing but ApiVersions and
		// SASL comes before authentication.
		c.f.logger.Warn("a client sent a request before SASL authentication; connection closed",
			"client", c.RemoteAddr().String(), "request", kmsg.NameForKey(key))
	}
	return frame(body)
}

// requestBody returns what follows the request header of body.
func requestBody(body []byte, flexible bool) ([]byte, bool) {
	r := kbin.Reader{Src: body[8:]}
	r.NullableString() // client ID
	if flexible {
		kmsg.SkipTags(&r)
	}
	return r.Src, r.Ok()
}

// handshakeMechanism returns the mechanism a SaslHandshake request names.
func handshakeMechanism(body []byte) string {
	var req kmsg.SASLHandshakeRequest
	rest, ok := requestBody(body, false)
	if !ok || req.ReadFrom(rest) != nil {
		return ""
	}
	return req.Mechanism
}

// noteUser remembers the user the first token of a login names, for the
// log of a failure. Called with c.mu held.
func (c *saslConn) noteUser(token []byte) {
	if c.user != "" {
		return
	}
	switch c.mech {
	case "PLAIN": // authzid \0 user \0 password: never keep the password
		if parts := strings.SplitN(string(token), "\x00", 3); len(parts) == 3 {
			c.user = parts[1]
		}
	case "SCRAM-SHA-256", "SCRAM-SHA-512": // n,,n=user,r=nonce
		for _, attr := range strings.Split(string(token), ",") {
			if u, ok := strings.CutPrefix(attr, "n="); ok {
				c.user = strings.NewReplacer("=2C", ",", "=3D", "=").Replace(u)
				break
			}
		}
	}
}

// Write takes kfake's responses, rewrites the ones the front tracks and
// sends them to the client.
func (c *saslConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	authed := c.authed
	c.mu.Unlock()
	if authed && len(c.wbuf) == 0 {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		return c.Conn.Write(p)
	}
	c.wbuf = append(c.wbuf, p...)
	for len(c.wbuf) >= 4 {
		n := int(binary.BigEndian.Uint32(c.wbuf[:4]))
		if len(c.wbuf) < 4+n {
			break
		}
		out := c.rewrite(c.wbuf[4 : 4+n])
		c.wbuf = c.wbuf[4+n:]
		if out == nil {
			continue
		}
		c.wmu.Lock()
		_, err := c.Conn.Write(out)
		c.wmu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	if len(c.wbuf) == 0 {
		c.wbuf = nil
	}
	return len(p), nil
}

// rewrite returns the frame the client gets for one of kfake's responses
// (body: correlation ID onwards).
func (c *saslConn) rewrite(body []byte) []byte {
	if len(body) < 4 {
		return frame(body)
	}
	corr := int32(binary.BigEndian.Uint32(body[:4]))
	c.mu.Lock()
	defer c.mu.Unlock()
	pr, ok := c.pending[corr]
	if !ok {
		return frame(body)
	}
	delete(c.pending, corr)
	switch kmsg.Key(pr.key) {
	case kmsg.ApiVersions:
		return frame(c.rewriteApiVersions(body, pr.version))
	case kmsg.SASLHandshake:
		return frame(c.rewriteHandshake(body, pr.raw))
	case kmsg.SASLAuthenticate:
		c.authing = nil
		out, raw := c.rewriteAuthenticate(body, pr)
		if raw {
			return out
		}
		return frame(out)
	}
	return frame(body)
}

// rewriteApiVersions advertises SaslHandshake from v0. A response with an
// error (kfake's answer to a version it does not serve) lists no other
// key and goes out as is; so does one that does not parse.
func (c *saslConn) rewriteApiVersions(body []byte, version int16) []byte {
	if len(body) < 6 || binary.BigEndian.Uint16(body[4:6]) != 0 {
		return body
	}
	resp := kmsg.ApiVersionsResponse{Version: version}
	if err := resp.ReadFrom(body[4:]); err != nil {
		c.f.logger.Warn("an ApiVersions response did not parse; sent as kfake wrote it", "err", err)
		return body
	}
	for i := range resp.ApiKeys {
		if resp.ApiKeys[i].ApiKey == int16(kmsg.SASLHandshake) {
			resp.ApiKeys[i].MinVersion = 0
		}
	}
	return resp.AppendTo(body[:4:4])
}

// rewriteHandshake lists the enabled mechanisms and, after a successful
// SaslHandshake v0, makes the front expect raw tokens.
func (c *saslConn) rewriteHandshake(body []byte, raw bool) []byte {
	resp := kmsg.SASLHandshakeResponse{Version: 1}
	if err := resp.ReadFrom(body[4:]); err != nil {
		c.f.logger.Warn("a SaslHandshake response did not parse; sent as kfake wrote it", "err", err)
		return body
	}
	resp.SupportedMechanisms = mechanisms
	if resp.ErrorCode == 0 {
		c.steps = 1
		if strings.HasPrefix(c.mech, "SCRAM-") {
			c.steps = 2
		}
		// Set before the client can read the response and send
		// its first token.
		c.raw = raw
		c.rawCorr = -1
	}
	return resp.AppendTo(body[:4:4])
}

// rewriteAuthenticate counts a successful step of the login and, for a
// raw token, unwraps the response into a raw frame (returned with its
// size, raw true).
func (c *saslConn) rewriteAuthenticate(body []byte, pr pendingReq) (out []byte, raw bool) {
	resp := kmsg.SASLAuthenticateResponse{Version: pr.version}
	r := kbin.Reader{Src: body[4:]}
	if resp.IsFlexible() {
		kmsg.SkipTags(&r)
	}
	if !r.Ok() || resp.ReadFrom(r.Src) != nil {
		c.f.logger.Warn("a SaslAuthenticate response did not parse; sent as kfake wrote it")
		return body, false
	}
	if resp.ErrorCode == 0 {
		c.steps--
		if c.steps <= 0 {
			c.authed = true
			c.raw = false
		}
	}
	if !pr.raw {
		return body, false
	}
	if resp.ErrorCode != 0 {
		return nil, true // v0 has no way to say why: the connection closes
	}
	return frame(resp.SASLAuthBytes), true
}

// Close closes the connection. If kfake closes it while a SaslAuthenticate
// of the client waits for its answer, kfake refused the login: the
// client is told so first (SASL_AUTHENTICATION_FAILED), unless its
// tokens came raw, the client went away, or the broker is closing.
func (c *saslConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		pr, corr, mech, user, readErr := c.authing, c.authCorr, c.mech, c.user, c.readErr
		c.authing = nil
		c.mu.Unlock()
		if pr != nil && !readErr && !c.f.closing.Load() {
			c.f.failed(c.Conn, mech, user, pr.raw)
			if !pr.raw {
				c.writeAuthFailure(pr.version, corr, mech)
			}
		}
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// writeAuthFailure answers the SaslAuthenticate with correlation ID corr
// with SASL_AUTHENTICATION_FAILED, in the words Kafka uses.
func (c *saslConn) writeAuthFailure(version int16, corr int32, mech string) {
	resp := kmsg.NewPtrSASLAuthenticateResponse()
	resp.Version = version
	resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
	msg := "Authentication failed: Invalid username or password"
	if strings.HasPrefix(mech, "SCRAM-") {
		msg = "Authentication failed during authentication due to invalid credentials with SASL mechanism " + mech
	}
	resp.ErrorMessage = &msg
	body := binary.BigEndian.AppendUint32(nil, uint32(corr))
	if resp.IsFlexible() {
		body = append(body, 0) // no tagged fields in the header
	}
	body = resp.AppendTo(body)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.Conn.SetWriteDeadline(time.Now().Add(authFailWriteTimeout))
	if _, err := c.Conn.Write(frame(body)); err != nil && !errors.Is(err, net.ErrClosed) {
		c.f.logger.Debug("could not tell a client its login failed", "client", c.RemoteAddr().String(), "err", err)
	}
}
