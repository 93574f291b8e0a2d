//go:build sarama

package bench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// SaramaBuildTag is the build tag that compiles the Sarama baseline (B2)
// into the binary; this build has it.
const SaramaBuildTag = "sarama"

// saramaLinked reports whether this build links IBM/sarama (B2 runs).
const saramaLinked = true

// saramaVersion is the Kafka protocol version B2 tells Sarama the
// broker speaks.
func saramaVersion() sarama.KafkaVersion { return sarama.V3_6_0_0 }

// B2 is the Sarama baseline: an IBM/sarama ConsumerGroup (sticky
// balance strategy, fresh group, from the oldest offset) whose handler does
// nothing with a message but count and mark it, until env.Records messages
// were consumed across all claims. If Sarama cannot join the group on the
// broker within 30s, the result is Skipped with the reason.
func B2(ctx context.Context, env *Env) (Result, error) {
	const id, name = "B2", "IBM/sarama ConsumerGroup, no-op handler"
	cfg := sarama.NewConfig()
	cfg.Version = saramaVersion()
	cfg.ClientID = "workrouter-bench-sarama"
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	cfg.Consumer.Return.Errors = false
	cfg.Metadata.Full = false
	if err := cfg.Validate(); err != nil {
		return Result{ID: id, Name: name, Skipped: "sarama config: " + err.Error()}, nil
	}
	group, err := sarama.NewConsumerGroup(env.Brokers, UniqueName("bench-sarama"), cfg)
	if err != nil {
		return Result{ID: id, Name: name, Skipped: fmt.Sprintf("sarama cannot connect to the broker (version %s): %v", saramaVersion(), err)}, nil
	}
	defer group.Close()

	n := int64(env.Records)
	h := &saramaHandler{n: n, joined: make(chan struct{})}
	var got int64
	var skip string
	r, err := Measure(id, name, env.Records, func() error {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		h.cancel = cancel
		errc := make(chan error, 1)
		go func() {
			var last error
			for cctx.Err() == nil {
				if err := group.Consume(cctx, []string{env.Topic}, h); err != nil {
					last = err
					if errors.Is(err, sarama.ErrClosedConsumerGroup) {
						break
					}
					select {
					case <-cctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
			errc <- last
		}()
		select {
		case <-h.joined:
		case <-time.After(30 * time.Second):
			cancel()
			last := <-errc
			skip = fmt.Sprintf("sarama (version %s) did not join the group within 30s: %v", saramaVersion(), last)
			return nil
		case <-ctx.Done():
			cancel()
			<-errc
			return ctx.Err()
		}
		<-errc
		got = h.count.Load()
		if got < n {
			return fmt.Errorf("sarama consumed %d of %d records: %w", got, n, ctx.Err())
		}
		return nil
	})
	if skip != "" {
		return Result{ID: id, Name: name, Skipped: skip}, nil
	}
	r.Records = int(got)
	return r, err
}

// saramaHandler counts messages across claims and cancels the consume
// loop once n were seen.
type saramaHandler struct {
	n      int64
	count  atomic.Int64
	cancel context.CancelFunc
	joined chan struct{}
	once   atomic.Bool
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error {
	if h.once.CompareAndSwap(false, true) {
		close(h.joined)
	}
	return nil
}

func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *saramaHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			sess.MarkMessage(msg, "")
			if h.count.Add(1) >= h.n {
				h.cancel()
			}
		case <-sess.Context().Done():
			return nil
		}
	}
}
