package broker_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/workrouter/workrouter/cmd/internal/broker"
	"github.com/workrouter/workrouter/internal/testtls"
)

// The SASL protocol as the foreign clients speak it, byte by byte: these
// tests need no client installed (foreign_test.go runs the clients).

const saslUser, saslPassword = "app", "s3cret-pw"

var allMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// mechanism returns franz-go's client side of mech for user and password.
func mechanism(t *testing.T, mech, password string) sasl.Mechanism {
	t.Helper()
	switch mech {
	case "PLAIN":
		return plain.Auth{User: saslUser, Pass: password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: saslUser, Pass: password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: saslUser, Pass: password}.AsSha512Mechanism()
	}
	t.Fatalf("no mechanism %q", mech)
	return nil
}

// saslBroker starts a broker with the user saslUser, over TLS if tlsConf is
// not nil.
func saslBroker(t *testing.T, tlsConf *tls.Config, topics map[string]int32) *broker.Broker {
	t.Helper()
	return start(t, broker.Config{
		Listen: "127.0.0.1:0",
		TLS:    tlsConf,
		Users:  []broker.User{{Name: saslUser, Password: saslPassword}},
		Topics: topics,
	})
}

// rawConn is a Kafka connection driven request by request.
type rawConn struct {
	t    *testing.T
	c    net.Conn
	corr int32
	f    *kmsg.RequestFormatter
}

func dial(t *testing.T, b *broker.Broker) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))}
}

// request sends req and reads its response into resp (of req's version).
func (r *rawConn) request(req kmsg.Request) (kmsg.Response, error) {
	r.corr++
	if _, err := r.c.Write(r.f.AppendRequest(nil, req, r.corr)); err != nil {
		return nil, err
	}
	body, err := r.readFrame()
	if err != nil {
		return nil, err
	}
	if len(body) < 4 || int32(binary.BigEndian.Uint32(body)) != r.corr {
		return nil, fmt.Errorf("response %x does not carry correlation ID %d", body, r.corr)
	}
	resp := req.ResponseKind()
	body = body[4:]
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		body = body[1:] // the header's empty tagged fields
	}
	if err := resp.ReadFrom(body); err != nil {
		return nil, fmt.Errorf("%s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

func (r *rawConn) readFrame() ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r.c, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(r.c, body)
	return body, err
}

// handshake sends SaslHandshake at version for mech.
func (r *rawConn) handshake(version int16, mech string) *kmsg.SASLHandshakeResponse {
	r.t.Helper()
	req := kmsg.NewPtrSASLHandshakeRequest()
	req.Version, req.Mechanism = version, mech
	resp, err := r.request(req)
	if err != nil {
		r.t.Fatalf("SaslHandshake v%d %s: %v", version, mech, err)
	}
	return resp.(*kmsg.SASLHandshakeResponse)
}

// login runs m's exchange after a successful handshake: as raw frames if
// raw (SaslHandshake v0), else in SaslAuthenticate requests of authVersion.
// It returns the broker's refusal, if any.
func (r *rawConn) login(m sasl.Mechanism, raw bool, authVersion int16) error {
	r.t.Helper()
	session, msg, err := m.Authenticate(context.Background(), "")
	if err != nil {
		r.t.Fatal(err)
	}
	for {
		var got []byte
		if raw {
			if _, err := r.c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(msg)))); err != nil {
				return err
			}
			if _, err := r.c.Write(msg); err != nil {
				return err
			}
			if got, err = r.readFrame(); err != nil {
				return err
			}
		} else {
			req := kmsg.NewPtrSASLAuthenticateRequest()
			req.Version, req.SASLAuthBytes = authVersion, msg
			resp, err := r.request(req)
			if err != nil {
				return err
			}
			ar := resp.(*kmsg.SASLAuthenticateResponse)
			if err := kerr.ErrorForCode(ar.ErrorCode); err != nil {
				msg := ""
				if ar.ErrorMessage != nil {
					msg = *ar.ErrorMessage
				}
				return fmt.Errorf("%w: %s", err, msg)
			}
			got = ar.SASLAuthBytes
		}
		done, next, err := session.Challenge(got)
		if err != nil {
			r.t.Fatalf("the broker's answer does not verify: %v", err)
		}
		if done {
			return nil
		}
		msg = next
	}
}

// metadata proves the connection is authenticated: a Metadata request is
// answered with the broker.
func (r *rawConn) metadata(b *broker.Broker) {
	r.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 1
	resp, err := r.request(req)
	if err != nil {
		r.t.Fatalf("Metadata after login: %v", err)
	}
	brokers := resp.(*kmsg.MetadataResponse).Brokers
	if len(brokers) != 1 || net.JoinHostPort(brokers[0].Host, fmt.Sprint(brokers[0].Port)) != b.Advertised() {
		r.t.Fatalf("Metadata after login lists brokers %+v, want %s", brokers, b.Advertised())
	}
}

// expectClosed checks that the broker closed the connection (a reset:
// closed with bytes of ours unread).
func (r *rawConn) expectClosed() {
	r.t.Helper()
	_, err := r.readFrame()
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		r.t.Fatalf("the connection reads %v, want it closed by the broker", err)
	}
}

// TestApiVersionsAdvertisesSaslHandshakeV0: librdkafka requires v0 in the
// range before it logs in at all ("SASL Handshake not supported by
// broker"); kfake alone advertises v1..v1.
func TestApiVersionsAdvertisesSaslHandshakeV0(t *testing.T) {
	b := saslBroker(t, nil, nil)
	for _, v := range []int16{0, 3, 4} {
		r := dial(t, b)
		req := kmsg.NewPtrApiVersionsRequest()
		req.Version = v
		req.ClientSoftwareName, req.ClientSoftwareVersion = "raw-test", "1.0"
		resp, err := r.request(req)
		if err != nil {
			t.Fatalf("ApiVersions v%d: %v", v, err)
		}
		keys := resp.(*kmsg.ApiVersionsResponse).ApiKeys
		i := slices.IndexFunc(keys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == int16(kmsg.SASLHandshake) })
		if i < 0 || keys[i].MinVersion != 0 || keys[i].MaxVersion != 1 {
			t.Fatalf("ApiVersions v%d does not advertise SaslHandshake v0..v1 (index %d of %d keys: %+v)", v, i, len(keys), keys[max(i, 0)])
		}
		j := slices.IndexFunc(keys, func(k kmsg.ApiVersionsResponseApiKey) bool { return k.ApiKey == int16(kmsg.SASLAuthenticate) })
		if j < 0 || keys[j].MinVersion != 0 {
			t.Fatalf("ApiVersions v%d does not advertise SaslAuthenticate from v0 (index %d)", v, j)
		}
		// The rest of the response survived the rewrite.
		if len(keys) < 40 {
			t.Fatalf("ApiVersions v%d lists %d keys", v, len(keys))
		}
	}
}

// TestSaslHandshakeListsMechanisms: KafkaJS and kafka-python look for their
// mechanism in the handshake's list; kfake alone sends an empty one.
func TestSaslHandshakeListsMechanisms(t *testing.T) {
	b := saslBroker(t, nil, nil)
	for _, v := range []int16{0, 1} {
		for _, mech := range append(slices.Clone(allMechanisms), "GSSAPI") {
			t.Run(fmt.Sprintf("v%d/%s", v, mech), func(t *testing.T) {
				resp := dial(t, b).handshake(v, mech)
				wantErr := int16(0)
				if mech == "GSSAPI" {
					wantErr = kerr.UnsupportedSaslMechanism.Code
				}
				if resp.ErrorCode != wantErr || !slices.Equal(resp.SupportedMechanisms, allMechanisms) {
					t.Fatalf("SaslHandshake v%d %s: error %d, mechanisms %q; want error %d and %q",
						v, mech, resp.ErrorCode, resp.SupportedMechanisms, wantErr, allMechanisms)
				}
			})
		}
	}
}

// TestSaslLogin logs in with every mechanism the three ways clients do:
// SaslHandshake v0 and raw tokens (kafka-python), and SaslHandshake v1
// with SaslAuthenticate v0 (librdkafka) and v1, v2 (KafkaJS, franz-go),
// with and without TLS; with the right password the connection serves a
// Metadata request, with a wrong one the broker refuses it, answers
// SASL_AUTHENTICATION_FAILED where the protocol lets it (not after raw
// tokens), closes the connection and counts the failure.
func TestSaslLogin(t *testing.T) {
	tf := testtls.New(t)
	for _, secure := range []bool{false, true} {
		var tlsConf *tls.Config
		proto := "SASL_PLAINTEXT"
		if secure {
			tlsConf, proto = tf.ServerConfig(t), "SASL_SSL"
		}
		b := saslBroker(t, tlsConf, nil)
		connect := func(t *testing.T) *rawConn {
			r := dial(t, b)
			if secure {
				r.c = tls.Client(r.c, clientTLS(t, tf.CA))
			}
			return r
		}
		for _, mech := range allMechanisms {
			for _, way := range []struct {
				name        string
				handshake   int16
				authVersion int16
			}{{"handshake-v0-raw", 0, -1}, {"authenticate-v0", 1, 0}, {"authenticate-v1", 1, 1}, {"authenticate-v2", 1, 2}} {
				raw := way.handshake == 0
				t.Run(fmt.Sprintf("%s/%s/%s", proto, mech, way.name), func(t *testing.T) {
					r := connect(t)
					if hs := r.handshake(way.handshake, mech); hs.ErrorCode != 0 {
						t.Fatalf("SaslHandshake: %v", kerr.ErrorForCode(hs.ErrorCode))
					}
					if err := r.login(mechanism(t, mech, saslPassword), raw, way.authVersion); err != nil {
						t.Fatalf("login with the right password: %v", err)
					}
					r.metadata(b)

					before := b.AuthFailures()
					r = connect(t)
					if hs := r.handshake(way.handshake, mech); hs.ErrorCode != 0 {
						t.Fatalf("SaslHandshake: %v", kerr.ErrorForCode(hs.ErrorCode))
					}
					err := r.login(mechanism(t, mech, "wrong-"+saslPassword), raw, way.authVersion)
					switch {
					case raw && err == nil:
						t.Fatal("login with a wrong password succeeded")
					case raw && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
						t.Fatalf("login with a wrong password: %v, want the connection closed", err)
					case !raw && !errors.Is(err, kerr.SaslAuthenticationFailed):
						t.Fatalf("login with a wrong password: %v, want %v", err, kerr.SaslAuthenticationFailed)
					}
					t.Logf("wrong password: %v", err)
					r.expectClosed()
					if got := b.AuthFailures(); got != before+1 {
						t.Fatalf("AuthFailures went from %d to %d, want one more", before, got)
					}
				})
			}
		}
	}
}

// clientTLS trusts the CA in the PEM file caFile.
func clientTLS(t *testing.T, caFile string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", caFile)
	}
	return &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// TestRequestBeforeLoginClosesTheConnection: nothing but ApiVersions and
// SASL is served before a login.
func TestRequestBeforeLoginClosesTheConnection(t *testing.T) {
	b := saslBroker(t, nil, nil)
	r := dial(t, b)
	req := kmsg.NewPtrMetadataRequest()
	req.Version = 1
	if resp, err := r.request(req); err == nil {
		t.Fatalf("Metadata before login answered: %+v", resp)
	}
	if b.AuthFailures() != 0 {
		t.Fatalf("AuthFailures = %d: no login was tried", b.AuthFailures())
	}

	// A frame of 2 GiB before a login is refused at its size, like Kafka's
	// sasl.server.max.receive.size: the connection is closed (the
	// deadline only ends the test if it is not).
	r = dial(t, b)
	if err := r.c.SetDeadline(time.Now().Add(deadline)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.c.Write([]byte{0x7f, 0xff, 0xff, 0xff, 0, 18, 0, 0}); err != nil {
		t.Fatal(err)
	}
	r.expectClosed()
}

// TestLargeRequestRightAfterLogin: the first request after a login (kfake
// reads it while the login's last answer is still on its way) may be as
// large as any (franz-go's produce connection sends a Produce first); the
// bound on frames before authentication does not apply to it.
func TestLargeRequestRightAfterLogin(t *testing.T) {
	b := saslBroker(t, nil, nil)
	for _, mech := range allMechanisms {
		for _, handshake := range []int16{0, 1} {
			r := dial(t, b)
			if hs := r.handshake(handshake, mech); hs.ErrorCode != 0 {
				t.Fatalf("SaslHandshake: %v", kerr.ErrorForCode(hs.ErrorCode))
			}
			if err := r.login(mechanism(t, mech, saslPassword), handshake == 0, 2); err != nil {
				t.Fatalf("login: %v", err)
			}
			req := kmsg.NewPtrMetadataRequest()
			req.Version = 1
			for i := range 20000 { // about 900 KiB
				rt := kmsg.NewMetadataRequestTopic()
				name := fmt.Sprintf("a-topic-name-long-enough-to-fill-a-frame-%05d", i)
				rt.Topic = &name
				req.Topics = append(req.Topics, rt)
			}
			resp, err := r.request(req)
			if err != nil {
				t.Fatalf("%s, handshake v%d: a %d-topic Metadata request right after the login: %v", mech, handshake, len(req.Topics), err)
			}
			if n := len(resp.(*kmsg.MetadataResponse).Topics); n != len(req.Topics) {
				t.Fatalf("Metadata answered %d topics of %d", n, len(req.Topics))
			}
		}
	}
}
