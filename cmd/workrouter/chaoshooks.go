package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/cmd/internal/faults"
	"github.com/workrouter/workrouter/sink"
)

// chaosHooks are the fault-injection hooks `worker --chaos` installs, each
// triggered by a signal from the chaos harness (see the --chaos flag).
type chaosHooks[Tx any] struct {
	sink   sink.Sink[Tx]
	freeze *faults.Freezer[Tx]
	cut    *faults.Interrupter[Tx]
	dialer *faults.Dialer
	stall  time.Duration
	log    *slog.Logger
}

func newChaosHooks[Tx any](s sink.Sink[Tx], stall time.Duration, logger *slog.Logger) *chaosHooks[Tx] {
	h := &chaosHooks[Tx]{dialer: faults.NewDialer(), stall: stall, log: logger}
	h.cut = faults.NewInterrupter(s, func(tok epochs.Token, err error) {
		logger.Warn(faults.MsgSinkCut, tokenLogAttrs(tok, "err", err)...)
	})
	h.freeze = faults.NewFreezer[Tx](h.cut, func(tok epochs.Token, _ []int64) {
		logger.Warn(faults.MsgFreezing, tokenLogAttrs(tok)...)
	})
	h.sink = h.freeze
	return h
}

func tokenLogAttrs(tok epochs.Token, more ...any) []any {
	return append([]any{"group", tok.Group, "topic", tok.Topic, "partition", tok.Partition, "epoch", tok.Epoch, "member", tok.Member}, more...)
}

// start listens for the chaos signals until ctx is done or the returned
// stop is called; stop waits for the listening goroutine and lifts any
// stall.
func (h *chaosHooks[Tx]) start(ctx context.Context) (stop func()) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGWINCH)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				h.handle(sig)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		signal.Stop(sigs)
		h.dialer.Close()
	}
}

func (h *chaosHooks[Tx]) handle(sig os.Signal) {
	switch sig {
	case syscall.SIGUSR1:
		h.freeze.Arm()
		h.log.Warn(faults.MsgFreezeArmed)
	case syscall.SIGUSR2:
		h.log.Warn(faults.MsgBrokerCut, "conns", h.dialer.Cut())
	case syscall.SIGHUP:
		h.log.Warn(faults.MsgBrokerStall, "conns", h.dialer.Stall(h.stall), "for", h.stall)
	case syscall.SIGWINCH:
		h.cut.Arm()
		h.log.Warn(faults.MsgSinkArmed)
	}
}
