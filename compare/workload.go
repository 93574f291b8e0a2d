package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/router"
)

// workload is a deterministic stream of ledger commands: deposits (70%)
// and withdrawals (30%, refused by the overdraft rule when they would
// overdraw) over keys accounts, picked uniformly or by a Zipf law.
type workload struct {
	cmds []router.Command
	// want is each account's final balance when its commands are applied
	// once each, in produce order.
	want map[string]int64
}

// recordPad pads every payload so that a record is about 200 bytes
// (key, type and ID headers, JSON payload).
const recordPad = 96

func newWorkload(n, keys int, dist string, seed uint64) (*workload, error) {
	r := rand.New(rand.NewPCG(seed, 45))
	var pick func() int
	switch dist {
	case "uniform":
		pick = func() int { return r.IntN(keys) }
	case "zipf":
		z := rand.NewZipf(r, 1.1, 1, uint64(keys-1))
		pick = func() int { return int(z.Uint64()) }
	default:
		return nil, fmt.Errorf("compare: --dist %q: want uniform or zipf", dist)
	}
	w := &workload{want: map[string]int64{}}
	seq := map[string]int{}
	pad := strings.Repeat("x", recordPad)
	for i := range n {
		acct := fmt.Sprintf("acct-%05d", pick())
		typ := ledger.TypeDeposit
		if r.IntN(10) < 3 {
			typ = ledger.TypeWithdraw
		}
		amount := int64(1 + r.IntN(1000))
		body, _ := json.Marshal(struct {
			ID     string `json:"id"`
			Seq    int    `json:"seq"`
			Amount int64  `json:"amount"`
			Note   string `json:"note"`
		}{fmt.Sprintf("c-%d", i), seq[acct], amount, pad})
		seq[acct]++
		w.cmds = append(w.cmds, router.Command{Key: []byte(acct), Type: typ, Payload: body})
		switch {
		case typ == ledger.TypeDeposit:
			w.want[acct] += amount
		case w.want[acct] >= amount:
			w.want[acct] -= amount
		default:
			w.want[acct] += 0 // refused; the account exists at 0
		}
	}
	return w, nil
}

// createTopic creates topic with partitions partitions (replication 1).
func createTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	res, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err != nil {
		return fmt.Errorf("compare: create topic %s: %w", topic, err)
	}
	if res.Err != nil {
		return fmt.Errorf("compare: create topic %s: %w", topic, res.Err)
	}
	return nil
}

// deleteTopics deletes the harness's topics; a failure is reported, not fatal.
func deleteTopics(ctx context.Context, brokers []string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	_, err = kadm.NewClient(cl).DeleteTopics(ctx, topics...)
	return err
}

// produce sends cmds to topic through workrouter's router (murmur2, as the
// Java clients' default partitioner). rate > 0 paces the sends at rate
// commands a second; 0 sends them as fast as the router takes them.
func produce(ctx context.Context, brokers []string, topic string, cmds []router.Command, rate int) error {
	rt, err := router.New(ctx, router.Config{Brokers: brokers, Topic: topic})
	if err != nil {
		return err
	}
	defer rt.Close()
	errc := make(chan error, 1)
	start := time.Now()
	for i, c := range cmds {
		if rate > 0 {
			due := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
			if d := time.Until(due); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		rt.SendAsync(ctx, c, func(_ router.Result, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := rt.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("compare: produce: %w", err)
	default:
		return nil
	}
}
