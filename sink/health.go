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

// PermanentClassifier is an optional capability of a sink: telling an
// error that no retry of the same record can fix — the database refused a
// statement for the values it was given, such as text that is not valid
// in the database's encoding — from one that may pass on a later attempt.
// A record whose handler fails with a permanent error is dead-lettered at
// once (reason permanent), as if the handler had marked the error
// permanent itself, instead of after its retry budget. It never holds for
// an error IsSinkFailure holds for.
type PermanentClassifier interface {
	// IsPermanent reports whether err, returned by an effect, can never
	// succeed on a retry of the same record.
	IsPermanent(err error) bool
}

// Pinger is an optional capability of a sink: checking that its storage
// answers. The consumer pings before it counts a handler's error against
// a record's budget, in case the error hid a failure of the sink.
type Pinger interface {
	Ping(ctx context.Context) error
}
