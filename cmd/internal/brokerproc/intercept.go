package brokerproc

import (
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CoordMode is what a coordinator fault answers.
type CoordMode int

// The answers of a coordinator fault.
const (
	// CoordNotCoordinator answers NOT_COORDINATOR.
	CoordNotCoordinator CoordMode = iota
	// CoordRebalancing answers REBALANCE_IN_PROGRESS.
	CoordRebalancing
	// CoordNoReply holds the request back without a reply until the
	// fault ends.
	CoordNoReply
)

// String returns "NOT_COORDINATOR", "REBALANCE_IN_PROGRESS" or "no reply".
func (m CoordMode) String() string {
	if m < CoordNotCoordinator || m > CoordNoReply {
		return fmt.Sprintf("CoordMode(%d)", int(m))
	}
	return [...]string{"NOT_COORDINATOR", "REBALANCE_IN_PROGRESS", "no reply"}[m]
}

// interceptor is the harness broker's one control function per
// intercepted request key (Heartbeat, ConsumerGroupHeartbeat,
// OffsetCommit), in the broker's process. It is always kept and does nothing unless a heartbeat
// or coordinator fault is active, so nothing has to be removed afterwards.
// Its methods may be called from any goroutine.
type interceptor struct {
	c *kfake.Cluster

	mu        sync.Mutex
	hbMember  string
	hbStop    chan struct{}
	swallowed int

	coMember string
	coMode   CoordMode
	coUntil  time.Time
	coStop   chan struct{}
	injected int

	closed chan struct{}
}

func newInterceptor(c *kfake.Cluster) *interceptor {
	in := &interceptor{c: c, closed: make(chan struct{})}
	for _, key := range []kmsg.Key{kmsg.Heartbeat, kmsg.ConsumerGroupHeartbeat, kmsg.OffsetCommit} {
		c.ControlKey(int16(key), in.control)
	}
	return in
}

func memberOf(req kmsg.Request) string {
	switch r := req.(type) {
	case *kmsg.HeartbeatRequest:
		return r.MemberID
	case *kmsg.ConsumerGroupHeartbeatRequest:
		return r.MemberID
	case *kmsg.OffsetCommitRequest:
		return r.MemberID
	}
	return ""
}

// control runs on the broker's request loop for each intercepted request.
func (in *interceptor) control(req kmsg.Request) (kmsg.Response, error, bool) {
	in.c.KeepControl()
	member := memberOf(req)
	isHeartbeat := req.Key() != int16(kmsg.OffsetCommit)
	in.mu.Lock()
	if isHeartbeat && in.hbStop != nil && member == in.hbMember {
		in.swallowed++
		stop := in.hbStop
		in.mu.Unlock()
		// Held back, no reply, until the fault ends; then the broker
		// handles it as it sees fit (usually: unknown member).
		in.c.SleepControl(func() {
			select {
			case <-stop:
			case <-in.closed:
			}
		})
		return nil, nil, false
	}
	if in.coStop != nil && member == in.coMember && time.Now().Before(in.coUntil) {
		in.injected++
		mode, stop, until := in.coMode, in.coStop, in.coUntil
		in.mu.Unlock()
		switch mode {
		case CoordNoReply:
			in.c.SleepControl(func() {
				t := time.NewTimer(time.Until(until))
				defer t.Stop()
				select {
				case <-t.C:
				case <-stop:
				case <-in.closed:
				}
			})
			return nil, nil, false
		case CoordRebalancing:
			return errorResponse(req, kerr.RebalanceInProgress.Code), nil, true
		default:
			return errorResponse(req, kerr.NotCoordinator.Code), nil, true
		}
	}
	in.mu.Unlock()
	return nil, nil, false
}

// errorResponse answers req with code.
func errorResponse(req kmsg.Request, code int16) kmsg.Response {
	resp := req.ResponseKind()
	resp.SetVersion(req.GetVersion())
	switch r := resp.(type) {
	case *kmsg.HeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.ConsumerGroupHeartbeatResponse:
		r.ErrorCode = code
	case *kmsg.OffsetCommitResponse:
		for _, t := range req.(*kmsg.OffsetCommitRequest).Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, code
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
	}
	return resp
}

// blackhole holds back member's heartbeats until the returned end is
// called; end reports how many were held.
func (in *interceptor) blackhole(member string) (end func() int) {
	stop := make(chan struct{})
	in.mu.Lock()
	in.hbMember, in.hbStop, in.swallowed = member, stop, 0
	in.mu.Unlock()
	return func() int {
		in.mu.Lock()
		defer in.mu.Unlock()
		close(stop)
		in.hbStop = nil
		return in.swallowed
	}
}

// coordinator answers member's heartbeats and offset commits with mode for
// d; end (call it after d) reports how many requests it answered so.
func (in *interceptor) coordinator(member string, mode CoordMode, d time.Duration) (end func() int) {
	stop := make(chan struct{})
	in.mu.Lock()
	in.coMember, in.coMode, in.coUntil, in.coStop, in.injected = member, mode, time.Now().Add(d), stop, 0
	in.mu.Unlock()
	return func() int {
		in.mu.Lock()
		defer in.mu.Unlock()
		close(stop)
		in.coStop = nil
		return in.injected
	}
}

// close wakes every held request; call it before closing the broker.
func (in *interceptor) close() { close(in.closed) }
