package faults

// Kinds of the events the fault hooks of the harness's worker report on
// its event stream (consumer/eventlog, next to the consumer's own events),
// as evidence for the harness that a fault really happened. The harness
// reads these, never the worker's log.
const (
	// KindFreezing: a Freezer is about to stop its process (SIGSTOP)
	// before a batch; the record carries the batch's token and offsets.
	KindFreezing = "fault.freezing"
	// KindFreezeArmed: the next batch is set to freeze.
	KindFreezeArmed = "fault.freeze_armed"
	// KindHolding: a holder (NewHolder) holds a batch before its write
	// until its gate file exists; the record carries the batch's token
	// and offsets.
	KindHolding = "fault.holding"
	// KindDialUnmapped: the worker dialled a broker address its dial
	// mapping (--dial-map) does not name, directly: a network fault on
	// its links does not reach that connection.
	KindDialUnmapped = "fault.dial_unmapped"
	// KindBrokerCut: the broker connections were closed.
	KindBrokerCut = "fault.broker_cut"
	// KindBrokerStall: the broker connections were stalled.
	KindBrokerStall = "fault.broker_stall"
	// KindSinkArmed: the next sink transaction is set to be interrupted.
	KindSinkArmed = "fault.sink_armed"
	// KindSinkCut: a sink transaction was interrupted mid-way.
	KindSinkCut = "fault.sink_cut"
	// KindHang: a Hang reached its point (inside the batch's last effect,
	// or after the sink's commit) and blocks.
	KindHang = "fault.hang"
)
