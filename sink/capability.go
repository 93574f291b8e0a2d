package sink

// Unwrapper is implemented by a sink that wraps another one — metrics,
// tracing, fault injection — to give access to it. A wrapper implements
// the Sink contract itself (its Features are those of what it wraps, or
// fewer) and Unwrap; it need not repeat the optional capabilities beside
// the write (Lister, Resetter, Historian, …) of what it wraps: callers
// find those with As, which looks through every wrapper.
type Unwrapper[Tx any] interface {
	// Unwrap returns the wrapped sink.
	Unwrap() Sink[Tx]
}

// maxUnwrap bounds the chain As follows, in case of a cycle.
const maxUnwrap = 100

// As reports whether s, or a sink it wraps (following [Unwrapper]'s Unwrap), implements
// the optional capability C, and returns the first one that does. Use it
// instead of a type assertion, so that a capability survives wrapping:
//
//	if l, ok := sink.As[fenceadmin.Lister](s); ok {
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
