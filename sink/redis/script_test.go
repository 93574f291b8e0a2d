package redis

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/sink"
)

// pipelineNames records the names of the commands of every pipeline the
// client sends.
type pipelineNames struct {
	mu    sync.Mutex
	names []string
}

func (h *pipelineNames) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *pipelineNames) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error { return next(ctx, cmd) }
}

func (h *pipelineNames) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.mu.Lock()
		for _, c := range cmds {
			h.names = append(h.names, c.Name())
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the names recorded since the last call.
func (h *pipelineNames) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.names
	h.names = nil
	return n
}

// With WaitReplicas, a script goes in WAIT's pipeline by its SHA1, and by
// its body only when the server does not have it cached: after SCRIPT
// FLUSH the claim still lands (EVALSHA refused with NOSCRIPT, then EVAL),
// and the next claim sends the SHA1 alone.
func TestWaitReplicasScriptBySHA(t *testing.T) {
	s := openSink(t, "", Config{WaitReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	ctx := t.Context()
	info, err := s.Client().Info(ctx, "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "connected_slaves:0") {
		t.Skipf("the test server has replicas (%q): WAIT's count cannot be known", info)
	}
	h := &pipelineNames{}
	s.Client().AddHook(h)
	// Other tests' scripts go through Script.Run, which sends a body
	// after NOSCRIPT by itself: flushing the cache does not fail them.
	if err := s.Client().ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	h.take()
	tok := testToken(t, 1)
	if _, err := s.Claim(ctx, tok, sink.Observed{}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Claim after SCRIPT FLUSH: %v, want ErrNotReplicated (the claim ran, no replica has it)", err)
	}
	if got := h.take(); !slices.Contains(got, "evalsha") || !slices.Contains(got, "eval") {
		t.Fatalf("pipelines after SCRIPT FLUSH sent %v: want EVALSHA refused, then EVAL", got)
	}
	r := openSink(t, s.Prefix(), Config{})
	fs, err := r.Fences(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Holder != tok {
		t.Fatalf("fences %+v: want the claim of %v stored", fs, tok)
	}
	tok.Epoch = 2
	if _, err := s.Claim(ctx, tok, sink.Observed{}); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("second Claim: %v, want ErrNotReplicated", err)
	}
	if got := h.take(); !slices.Contains(got, "evalsha") || slices.Contains(got, "eval") {
		t.Fatalf("the second claim's pipeline sent %v: want the script by its SHA1 only", got)
	}
}
