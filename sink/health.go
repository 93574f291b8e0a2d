package sink

import "context"

// ErrorClassifier is an optional capability of a sink: telling a failure
// of the sink itself — its database unreachable or busy, a lost
// connection, a timeout, a serialization conflict — from an error of a
// handler's own logic, also when the failure surfaced through a
// statement the handler ran inside the transaction. The consumer never
// counts a sink failure against a record's retry budget, so that an
// outage never dead-letters anything (docs/design.md#dead-letters).
type ErrorClassifier interface {
	// IsSinkFailure reports whether err, returned by an effect or by
	// Apply, is a failure of the sink rather than of the handler.
	IsSinkFailure(err error) bool
}

// Pinger is an optional capability of a sink: checking that its storage
// answers. The consumer pings before it counts a handler's error against
// a record's budget, in case the error hid a failure of the sink.
type Pinger interface {
	Ping(ctx context.Context) error
}
