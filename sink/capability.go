package sink

// Unwrapper is implemented by a sink that wraps another one — metrics,
// tracing, fault injection — to give access to it. A wrapper implements
// the Sink contract itself and Unwrap; it need not repeat the optional
// capabilities (Lister, Resetter, Historian, …) of what it wraps: callers
// find those with As, which looks through every wrapper. Deduplicator and
// GapApplier are the exceptions: they replace Apply (and GapApplier
// Claim and DeadLetter too), so a wrapper that wants its own calls made
// implements them too, and the consumer uses a sink's own Deduplicator
// and GapApplier, found by type assertion on the sink it was given, never
// ones As finds under a wrapper (which would bypass the wrapper).
type Unwrapper[Tx any] interface {
	// Unwrap returns the wrapped sink.
	Unwrap() Sink[Tx]
}

// maxUnwrap bounds the chain As follows, in case of a cycle.
const maxUnwrap = 100

// As reports whether s, or a sink it wraps (following Unwrap), implements
// the optional capability C, and returns the first one that does. Use it
// instead of a type assertion, so that a capability survives wrapping:
//
//	if l, ok := sink.As[sink.Lister](s); ok {
//		fences, err := l.Fences(ctx)
//		…
//	}
//
// A capability found under a wrapper is called directly, bypassing the
// wrappers above it (their metrics, their faults). As may be called from
// any goroutine.
func As[C any, Tx any](s Sink[Tx]) (C, bool) {
	for range maxUnwrap {
		if s == nil {
			break
		}
		if c, ok := any(s).(C); ok {
			return c, true
		}
		u, ok := s.(Unwrapper[Tx])
		if !ok {
			break
		}
		s = u.Unwrap()
	}
	var zero C
	return zero, false
}
