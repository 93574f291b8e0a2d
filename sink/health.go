package sink

import "context"

// Health is an optional capability of a sink: telling its own failures
// from a handler's, and checking that its storage answers. The consumer
// never counts a sink failure against a record's retry budget, so that an
// outage never dead-letters anything (docs/design.md#dead-letters), and
// dead-letters at once a record no retry can fix.
type Health interface {
	// IsSinkFailure reports whether err, returned by an effect or by
	// Apply, is a failure of the sink rather than of the handler: its
	// database unreachable or busy, a lost connection, a timeout, a
	// serialization conflict, also when it surfaced through a statement
	// the handler ran inside the transaction.
	IsSinkFailure(err error) bool
	// IsPermanent reports whether err, returned by an effect, can never
	// succeed on a retry of the same record: the database refused a
	// statement for the values it was given, such as text that is not
	// valid in its encoding. Such a record is dead-lettered at once
	// (reason permanent), as if the handler had marked the error
	// permanent. It never holds for an error IsSinkFailure holds for; a
	// sink that cannot tell returns false.
	IsPermanent(err error) bool
	// Ping checks that the sink's storage answers. The consumer pings
	// before it counts a handler's error against a record's budget, in
	// case the error hid a failure of the sink.
	Ping(ctx context.Context) error
}
