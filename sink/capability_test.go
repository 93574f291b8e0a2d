package sink_test

import (
	"context"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

type base struct{}

func (base) Features() sink.Features { return sink.Features{} }
func (base) Claim(context.Context, epochs.Token, sink.Observed) (sink.Checkpoint, error) {
	return sink.Checkpoint{}, nil
}
func (base) Apply(context.Context, epochs.Token, sink.Batch, sink.Effect[int]) (sink.Result, error) {
	return sink.Result{}, nil
}
func (base) DeadLetter(context.Context, epochs.Token, sink.DeadRecord) (sink.DeadLetterResult, error) {
	return sink.DeadLetterResult{}, sink.ErrUnsupported
}

type listing struct{ base }

func (listing) Fences(context.Context) ([]sink.Fence, error) { return nil, nil }

type wrapper struct {
	base
	inner sink.Sink[int]
}

func (w wrapper) Unwrap() sink.Sink[int] { return w.inner }

type selfWrap struct{ base }

func (s *selfWrap) Unwrap() sink.Sink[int] { return s }

func TestAs(t *testing.T) {
	if _, ok := sink.As[fenceadmin.Lister](sink.Sink[int](listing{})); !ok {
		t.Error("a sink's own capability not found")
	}
	if _, ok := sink.As[fenceadmin.Lister](sink.Sink[int](base{})); ok {
		t.Error("a capability found on a sink without it")
	}
	wrapped := wrapper{inner: wrapper{inner: listing{}}}
	if l, ok := sink.As[fenceadmin.Lister](sink.Sink[int](wrapped)); !ok {
		t.Error("a capability two wrappers down not found")
	} else if _, isListing := l.(listing); !isListing {
		t.Errorf("found %T, want the inner listing sink", l)
	}
	if _, ok := sink.As[fenceadmin.Resetter](sink.Sink[int](wrapped)); ok {
		t.Error("a capability nobody in the chain has was found")
	}
	if _, ok := sink.As[fenceadmin.Lister](sink.Sink[int](&selfWrap{})); ok {
		t.Error("a cycle of wrappers found a capability")
	}
	if _, ok := sink.As[fenceadmin.Lister](sink.Sink[int](wrapper{})); ok {
		t.Error("a wrapper of nil found a capability")
	}
}
