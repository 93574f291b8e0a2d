package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
)

// commitCutter is a TCP proxy in front of the test server that, once
// armed, cuts the connection at the next chunk the client sends — Apply's
// last pipeline, the fence's checked advance with COMMIT, when it is armed
// by the batch's last effect — either before forwarding it (the
// transaction is rolled back) or right after (it commits, but the client
// never hears so). Either way the client cannot know the outcome.
type commitCutter struct {
	ln      net.Listener
	target  string
	forward bool // forward the COMMIT before cutting
	armed   atomic.Bool
	cut     atomic.Int32
	// sawCommit: the server answered the forwarded COMMIT.
	sawCommit atomic.Bool
	mu        sync.Mutex
	conns     []net.Conn
}

func newCommitCutter(t *testing.T, target string, forward bool) *commitCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &commitCutter{ln: ln, target: target, forward: forward}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	go p.serve()
	return p
}

func (p *commitCutter) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		// After a forwarded COMMIT is cut, the server's reply is read
		// here and never reaches the client: committed is closed when
		// the server has answered COMMIT (so it has committed).
		cutting := make(chan struct{})
		committed := make(chan struct{})
		go func() {
			defer client.Close()
			buf := make([]byte, 64<<10)
			var after []byte
			for {
				n, err := server.Read(buf)
				if err != nil {
					return
				}
				select {
				case <-cutting:
					after = append(after, buf[:n]...)
					if bytes.Contains(after, []byte("COMMIT\x00")) {
						p.sawCommit.Store(true)
						close(committed)
						return
					}
					continue
				default:
				}
				if _, err := client.Write(buf[:n]); err != nil {
					return
				}
			}
		}()
		go func() {
			defer server.Close()
			defer client.Close()
			buf := make([]byte, 64<<10)
			for {
				n, err := client.Read(buf)
				if err != nil {
					return
				}
				chunk := buf[:n]
				if p.armed.Load() {
					p.armed.Store(false)
					p.cut.Add(1)
					close(cutting)
					client.Close() // the reply, if any, is lost
					if p.forward {
						_, _ = server.Write(chunk)
						select { // the server committed (its reply is dropped)
						case <-committed:
						case <-time.After(30 * time.Second):
						}
					}
					return
				}
				if _, err := server.Write(chunk); err != nil {
					return
				}
			}
		}()
	}
}

// A connection lost during COMMIT: Apply returns an error matching
// ErrOutcomeUnknown and not sink.ErrFenced, whether the transaction
// committed or not; retrying the same batch then applies it exactly once.
func TestCommitOutcomeUnknown(t *testing.T) {
	t.Parallel()
	for _, forward := range []bool{false, true} {
		t.Run("committed="+strconv.FormatBool(forward), func(t *testing.T) {
			t.Parallel()
			schema := newTestSchema(t)
			pcfg, err := pgxpool.ParseConfig(schemaDSN(t, schema))
			if err != nil {
				t.Fatal(err)
			}
			cc := pcfg.ConnConfig
			proxy := newCommitCutter(t, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), forward)
			host, port, _ := net.SplitHostPort(proxy.ln.Addr().String())
			p, _ := strconv.Atoi(port)
			cc.Host, cc.Port, cc.TLSConfig, cc.Fallbacks = host, uint16(p), nil, nil
			// One connection, so that the warm-up Apply below leaves
			// Apply's statements prepared on the one the cut Apply uses:
			// its last pipeline is then one chunk (pgx's first use of a
			// statement on a connection sends a Parse round trip first).
			pcfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(t.Context(), pcfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			s, err := Open(t.Context(), Config{Pool: pool, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })

			scope := epochs.Scope{Group: "g-outcome", Topic: "orders", Partition: 1}
			tok := tokenOf(scope, 1, "m")
			mustClaim(t, s, tok)
			offs := []int64{1, 2}
			warm := func(ctx context.Context, tx pgx.Tx, _ int) error {
				_, err := tx.Exec(ctx, appendKV, "warm-up", "x")
				return err
			}
			if res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: []int64{0}}, warm); err != nil || res.NextOffset != 1 {
				t.Fatalf("warm-up Apply = %+v, %v", res, err)
			}
			effect := func(arm bool) sink.Effect[pgx.Tx] {
				return func(ctx context.Context, tx pgx.Tx, i int) error {
					_, err := tx.Exec(ctx, appendKV, fmt.Sprint("k", offs[i]), "x")
					if arm && i == len(offs)-1 {
						proxy.armed.Store(true)
					}
					return err
				}
			}
			_, err = s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, effect(true))
			if proxy.cut.Load() != 1 {
				t.Fatalf("the proxy cut %d connections, want 1 (the fault did not happen)", proxy.cut.Load())
			}
			if !errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, sink.ErrFenced) {
				t.Fatalf("Apply cut at COMMIT: %v, want ErrOutcomeUnknown and not sink.ErrFenced", err)
			}
			t.Logf("error: %v", err)
			want := sink.Result{Applied: 2, NextOffset: 3}
			if forward {
				want = sink.Result{Skipped: 2, NextOffset: 3}
			}
			res, err := s.Apply(t.Context(), tok, sink.Batch{Offsets: offs}, effect(false))
			if err != nil || !res.Equal(want) {
				// Say whether the cut COMMIT had landed: a retry that
				// applied again after it would leave "xx".
				var vals []string
				for _, o := range offs {
					v, _, gerr := getKV(t.Context(), s, fmt.Sprint("k", o))
					vals = append(vals, fmt.Sprintf("k%d=%q (%v)", o, v, gerr))
				}
				t.Fatalf("retried Apply = %+v, %v; want %+v; the proxy saw the COMMIT answered: %v; kv after: %v", res, err, want, proxy.sawCommit.Load(), vals)
			}
			for _, o := range offs {
				if v, _, _ := getKV(t.Context(), s, fmt.Sprint("k", o)); v != "x" {
					t.Fatalf("kv(k%d) = %q, want x (exactly once)", o, v)
				}
			}
		})
	}
}
