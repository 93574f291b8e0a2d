// Command kafkacluster starts and stops a real Apache Kafka cluster on this
// machine (package internal/kafkacluster) for CI scripts and contributors:
//
//	kafkacluster fetch [--cache D]                        # the classpath, through Maven, once
//	kafkacluster up --dir D [--nodes N] [--set k=v]… [--group-log-level DEBUG]  # prints WORKROUTER_TEST_BROKERS=…
//	kafkacluster down --dir D                             # stops the nodes up started in D
//	kafkacluster measure [--nodes N] [--runs R] [--jvm '…'] # start times and resident memory
//
// up leaves the nodes running after it exits and records them in
// D/cluster.json; run again on a healthy cluster it starts nothing and
// prints the same line. down is idempotent. Progress goes to standard
// error; the only line on standard output is the variable to export.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/workrouter/workrouter/internal/kafkacluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "fetch":
		err = fetch(ctx, os.Args[2:])
	case "up":
		err = up(ctx, os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "measure":
		err = measure(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kafkacluster:", strings.TrimPrefix(err.Error(), "kafkacluster: "))
		if errors.Is(err, kafkacluster.ErrUnavailable) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: kafkacluster fetch [--cache DIR] | up --dir DIR [--nodes N] [--set key=value]… | down --dir DIR | measure [--nodes N] [--runs R] [--jvm OPTIONS]")
	os.Exit(2)
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

func fetch(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fetch", flag.ExitOnError)
	cache := fs.String("cache", "", "the classpath cache (default $"+kafkacluster.EnvCache+" or the user cache directory)")
	fs.Parse(args)
	start := time.Now()
	in, err := kafkacluster.Fetch(ctx, *cache, logf)
	if err != nil {
		return err
	}
	what := "cached"
	if in.Fetched {
		what = "fetched"
	}
	logf("kafkacluster: Kafka %s classpath %s in %s (%v)", kafkacluster.Version, what, in.Libs, time.Since(start).Round(time.Millisecond))
	return nil
}

type sets map[string]string

func (s sets) String() string { return fmt.Sprint(map[string]string(s)) }
func (s sets) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", v)
	}
	s[k] = val
	return nil
}

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	dir := fs.String("dir", "", "the cluster's directory (required)")
	nodes := fs.Int("nodes", 1, "how many nodes (each a broker and a controller)")
	cache := fs.String("cache", "", "the classpath cache")
	overrides := sets{}
	fs.Var(overrides, "set", "a broker property over the defaults, key=value (repeatable)")
	timeout := fs.Duration("timeout", 3*time.Minute, "how long to wait for the cluster to be ready")
	groupLog := fs.String("group-log-level", "", "Log4j level of the group coordinator's loggers (DEBUG logs every heartbeat's outcome; default INFO)")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("up needs --dir")
	}
	if st, ok := kafkacluster.Healthy(ctx, *dir); ok && len(st.Nodes) == *nodes {
		logf("kafkacluster: the cluster in %s is already up", *dir)
		fmt.Println("WORKROUTER_TEST_BROKERS=" + st.Brokers)
		return nil
	}
	if pids, err := kafkacluster.Down(*dir, 20*time.Second); err != nil {
		return err
	} else if len(pids) > 0 {
		logf("kafkacluster: stopped the unhealthy cluster recorded in %s (pids %v)", *dir, pids)
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	c, err := kafkacluster.Start(ctx, kafkacluster.Config{Nodes: *nodes, Dir: *dir, CacheDir: *cache,
		Overrides: overrides, GroupLogLevel: *groupLog, Logf: logf, Detached: true})
	if err != nil {
		return err
	}
	if err := c.Detach(); err != nil {
		c.Close()
		return err
	}
	logf("kafkacluster: %d node(s) ready in %v; stop them with: kafkacluster down --dir %s", *nodes, time.Since(start).Round(time.Millisecond), c.Dir())
	fmt.Println("WORKROUTER_TEST_BROKERS=" + c.BrokersEnv())
	return nil
}

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	dir := fs.String("dir", "", "the cluster's directory (required)")
	fs.Parse(args)
	if *dir == "" {
		return errors.New("down needs --dir")
	}
	pids, err := kafkacluster.Down(*dir, 30*time.Second)
	if err != nil {
		return err
	}
	if len(pids) == 0 {
		logf("kafkacluster: no running cluster recorded in %s", *dir)
		return nil
	}
	logf("kafkacluster: stopped %d node(s) in %s (pids %v)", len(pids), *dir, pids)
	return nil
}

// measure starts a cluster runs times, each in a fresh directory, and
// prints each run's time from Start to ready and each node's resident
// memory once ready, then the median time.
func measure(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("measure", flag.ExitOnError)
	nodes := fs.Int("nodes", 1, "how many nodes")
	runs := fs.Int("runs", 5, "how many starts")
	jvm := fs.String("jvm", "", "JVM options replacing the defaults, space-separated")
	fs.Parse(args)
	cfg := kafkacluster.Config{Nodes: *nodes}
	if *jvm != "" {
		cfg.JVMOptions = strings.Fields(*jvm)
	}
	var times []time.Duration
	for i := range *runs {
		start := time.Now()
		c, err := kafkacluster.Start(ctx, cfg)
		if err != nil {
			return err
		}
		d := time.Since(start)
		times = append(times, d)
		var rss []string
		for _, n := range c.Nodes() {
			rss = append(rss, fmt.Sprintf("node %d %s", n.ID, residentMemory(n.PID())))
		}
		c.Close()
		fmt.Printf("run %d: ready in %v; resident: %s\n", i+1, d.Round(time.Millisecond), strings.Join(rss, ", "))
	}
	slices.Sort(times)
	fmt.Printf("nodes=%d runs=%d median=%v min=%v max=%v\n", *nodes, *runs, times[len(times)/2].Round(time.Millisecond),
		times[0].Round(time.Millisecond), times[len(times)-1].Round(time.Millisecond))
	return nil
}

// residentMemory returns the VmRSS line of pid's /proc status.
func residentMemory(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "?"
}
