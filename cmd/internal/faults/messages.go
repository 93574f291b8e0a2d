package faults

// Log messages of the fault hooks `workrouter worker --chaos` installs; the
// chaos harness reads them from the worker's log as evidence that a fault
// really happened.
const (
	// MsgFreezing is logged right before a Freezer stops its process.
	MsgFreezing = "freezing (SIGSTOP) before batch"
	// MsgFreezeArmed is logged when the next batch is set to freeze.
	MsgFreezeArmed = "chaos: freeze armed"
	// MsgBrokerCut is logged when the broker connections were closed.
	MsgBrokerCut = "chaos: broker connections cut"
	// MsgBrokerStall is logged when the broker connections were stalled.
	MsgBrokerStall = "chaos: broker connections stalled"
	// MsgSinkArmed is logged when the next sink transaction is set to be
	// interrupted.
	MsgSinkArmed = "chaos: sink interrupt armed"
	// MsgSinkCut is logged after a sink transaction was interrupted.
	MsgSinkCut = "chaos: sink transaction interrupted"
)
