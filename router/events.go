package router

import "time"

// Observer receives a Router's events: put it in Config.Observers.
// Observe is called from the goroutine that reported the event (a send's
// caller, the producer's callback, the partition-count checker), so it must
// be safe for concurrent use and return at once. Package
// router/routerprom turns the events into Prometheus metrics.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// Event is one thing that happened to a Router: Started, Sent, NotSent,
// CountChanged or Closed. Switch on the concrete type.
type Event interface {
	isEvent()
}

// Started: New built the Router of Topic, which had Partitions
// partitions, with Policy for a change of that count. It is the first
// event of a Router.
type Started struct {
	Topic      string
	Partitions int32
	Policy     Policy
}

// Sent: a send handed to the producer completed after Took, with Err nil
// once Kafka acknowledged the record. Events are reported only to a Router
// with Observers, which then times every send.
type Sent struct {
	Topic string
	Took  time.Duration
	Err   error
}

// NotSent: a send failed before it reached the producer: an invalid
// command, a closed Router, or a partition count change under Refuse
// (Err matches ErrPartitionCountChanged).
type NotSent struct {
	Topic string
	Err   error
}

// CountChanged: the Router found Topic's partition count changed from
// Expected to Current, and applies Policy (under Refuse, also when the
// count changed again while sends were refused).
type CountChanged struct {
	Topic             string
	Expected, Current int32
	Policy            Policy
}

// Closed: Close finished; no event follows.
type Closed struct {
	Topic string
}

func (Started) isEvent()      {}
func (Sent) isEvent()         {}
func (NotSent) isEvent()      {}
func (CountChanged) isEvent() {}
func (Closed) isEvent()       {}

// emit reports e to every Observer.
func (r *Router) emit(e Event) {
	for _, o := range r.cfg.Observers {
		o.Observe(e)
	}
}
