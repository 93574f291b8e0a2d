package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink/postgres"
)

// workerEnv, when set in the environment, makes this program (or its test
// binary) a workrouter instance of the comparison instead of the harness:
// the harness starts instances of itself so that it can kill and freeze
// them as it does the Java programs.
const workerEnv = "COMPARE_WORKROUTER_INSTANCE"

// effectSQL writes the harness's audit and latency row, in the same
// transaction as the ledger's effects (compare_effects, see setupRun).
const effectSQL = `INSERT INTO compare_effects (part, off, member, gen, dup, produced_ms) VALUES ($1, $2, $3, $4, $5, $6)`

// instanceConfig is what the harness hands an instance, in the environment.
type instanceConfig struct {
	Brokers, Topic, Group, DSN, Schema, Member string
	Lanes, Pool, SleepMS, HoldMS, SessionMS    int
}

func (c instanceConfig) env() []string {
	return []string{
		workerEnv + "=1",
		"COMPARE_BROKERS=" + c.Brokers, "COMPARE_TOPIC=" + c.Topic, "COMPARE_GROUP=" + c.Group,
		"COMPARE_DSN=" + c.DSN, "COMPARE_SCHEMA=" + c.Schema, "COMPARE_MEMBER=" + c.Member,
		"COMPARE_LANES=" + strconv.Itoa(c.Lanes), "COMPARE_POOL=" + strconv.Itoa(c.Pool),
		"COMPARE_SLEEP_MS=" + strconv.Itoa(c.SleepMS), "COMPARE_HOLD_MS=" + strconv.Itoa(c.HoldMS),
		"COMPARE_SESSION_MS=" + strconv.Itoa(c.SessionMS),
	}
}

func instanceFromEnv() (instanceConfig, error) {
	c := instanceConfig{
		Brokers: os.Getenv("COMPARE_BROKERS"), Topic: os.Getenv("COMPARE_TOPIC"), Group: os.Getenv("COMPARE_GROUP"),
		DSN: os.Getenv("COMPARE_DSN"), Schema: os.Getenv("COMPARE_SCHEMA"), Member: os.Getenv("COMPARE_MEMBER"),
	}
	for name, dst := range map[string]*int{"LANES": &c.Lanes, "POOL": &c.Pool, "SLEEP_MS": &c.SleepMS, "HOLD_MS": &c.HoldMS, "SESSION_MS": &c.SessionMS} {
		v, err := strconv.Atoi(os.Getenv("COMPARE_" + name))
		if err != nil {
			return c, fmt.Errorf("compare: instance: COMPARE_%s: %w", name, err)
		}
		*dst = v
	}
	return c, nil
}

// runInstance is a workrouter instance: the ordinary API (consumer.New) over
// the fenced PostgreSQL sink, the ledger example's own handlers, KeyConcurrency
// lanes per partition. It prints "ready" once started, one "fenced …" line per
// write the sink refused, and "stopped" after a clean Close on SIGTERM.
func runInstance() error {
	c, err := instanceFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dsn := withParams(c.DSN, fmt.Sprintf("pool_max_conns=%d", c.Pool), "search_path="+c.Schema, "application_name="+appName(c.Schema, c.Member))
	s, err := postgres.Open(ctx, postgres.Config{DSN: dsn, Schema: c.Schema, Logger: logger})
	if err != nil {
		return err
	}
	defer s.Close()
	sleep, hold := time.Duration(c.SleepMS)*time.Millisecond, time.Duration(c.HoldMS)*time.Millisecond
	handlers := map[string]consumer.Handler[pgx.Tx]{}
	for typ, h := range ledger.PostgresHandlers() {
		handlers[typ] = func(ctx context.Context, tx pgx.Tx, cmd consumer.Command) error {
			if sleep > 0 {
				time.Sleep(sleep)
			}
			if err := h(ctx, tx, cmd); err != nil {
				return err
			}
			if hold > 0 {
				time.Sleep(hold)
			}
			_, err := tx.Exec(ctx, effectSQL, cmd.Token.Partition, cmd.Offset, c.Member, cmd.Token.Epoch, false, cmd.Timestamp.UnixMilli())
			return err
		}
	}
	out := make(chan string, 1024)
	printed := make(chan struct{})
	go func() { // the one writer of stdout
		defer close(printed)
		for line := range out {
			fmt.Println(line)
		}
	}()
	w, err := consumer.New(ctx, consumer.Config[pgx.Tx]{
		Brokers: strings.Split(c.Brokers, ","), Group: c.Group, Topic: c.Topic, Sink: s,
		Handlers: handlers, KeyConcurrency: c.Lanes, ClientID: c.Member,
		SessionTimeout: time.Duration(c.SessionMS) * time.Millisecond, Logger: logger,
		Observers: []consumer.Observer{consumer.ObserverFunc(func(e consumer.Event) {
			if f, ok := e.(consumer.Fenced); ok {
				out <- fmt.Sprintf("fenced partition=%d epoch=%d op=%s first_offset=%d records=%d", f.Token.Partition, f.Token.Epoch, f.Op, f.FirstOffset, f.Records)
			}
		})},
	})
	if err != nil {
		close(out)
		<-printed
		return err
	}
	out <- "ready"
	select {
	case <-ctx.Done():
		err = w.Close()
	case <-w.Done():
		err = w.Err()
	}
	if err == nil {
		out <- "stopped"
	}
	close(out)
	<-printed
	return err
}

// withParams adds query parameters to a URL-form DSN.
func withParams(dsn string, params ...string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + strings.Join(params, "&")
}
