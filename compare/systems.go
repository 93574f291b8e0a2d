package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The systems compared. Each runs as a process of its own, so that the
// zombie scenario can kill and freeze it.
const (
	sysWorkrouter  = "workrouter"   // workrouter, key lanes, fenced PostgreSQL sink
	sysPCKey       = "pc-key"       // Parallel Consumer, ProcessingOrder.KEY
	sysPCPartition = "pc-partition" // Parallel Consumer, ProcessingOrder.PARTITION
	sysPlain       = "plain"        // KafkaConsumer threads, commitSync after the DB transaction
)

var allSystems = []string{sysWorkrouter, sysPCKey, sysPCPartition, sysPlain}

// javaFlags are the JVM flags of both Java programs.
var javaFlags = []string{"-Xms256m", "-Xmx1g"}

// java is the built Java side: the java binary and the classpaths of the
// plain consumer (kafka-clients 4.4.0) and of Parallel Consumer (the same,
// with kafka-clients 3.9.1, which Parallel Consumer 0.5.3.3 is built
// against, instead).
type java struct {
	bin, classpath, pcClasspath string
}

// buildJava compiles compare/java with Maven (the jars cached in ~/.m2, outside
// the work tree) and returns how to run it.
func buildJava(ctx context.Context, dir string) (java, error) {
	bin, err := exec.LookPath("java")
	if err != nil {
		return java{}, fmt.Errorf("compare: no java on PATH: %w", err)
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return java{}, fmt.Errorf("compare: no mvn on PATH: %w", err)
	}
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "compile", "dependency:build-classpath", "-Dmdep.outputFile=target/classpath.txt")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return java{}, fmt.Errorf("compare: mvn compile in %s: %w\n%s", dir, err, tail(string(out), 3000))
	}
	cp, err := os.ReadFile(filepath.Join(dir, "target", "classpath.txt"))
	if err != nil {
		return java{}, err
	}
	classes := filepath.Join(dir, "target", "classes")
	pcClients := filepath.Join(dir, "target", "pc-lib", "kafka-clients-3.9.1.jar")
	var plain, pc []string
	for _, e := range filepath.SplitList(strings.TrimSpace(string(cp))) {
		plain = append(plain, e)
		if filepath.Base(e) == "kafka-clients-4.4.0.jar" {
			e = pcClients
		}
		pc = append(pc, e)
	}
	if slices.Equal(plain, pc) {
		return java{}, fmt.Errorf("compare: no kafka-clients-4.4.0.jar in %s's classpath", dir)
	}
	sep := string(os.PathListSeparator)
	return java{bin: bin, classpath: classes + sep + strings.Join(plain, sep), pcClasspath: classes + sep + strings.Join(pc, sep)}, nil
}

// instanceSpec is one consumer instance to start.
type instanceSpec struct {
	system      string
	brokers     string
	topic       string
	group       string
	dsn         string // postgres:// URL of the database
	schema      string // the run's schema
	member      string
	concurrency int // the cap N: PC maxConcurrency, plain threads, workrouter lanes × partitions
	partitions  int
	sleepMS     int // the handler sleeps this long before the ledger's effect
	holdMS      int // and this long after it, in its transaction, holding its row locks
	sessionMS   int
}

// instance is a running consumer process.
type instance struct {
	spec instanceSpec
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer // stdout and stderr
	done chan struct{}
	err  error
}

func (h *harness) start(ctx context.Context, s instanceSpec) (*instance, error) {
	var cmd *exec.Cmd
	switch s.system {
	case sysWorkrouter:
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		lanes := max(1, s.concurrency/s.partitions)
		cmd = exec.Command(self)
		cmd.Env = append(os.Environ(), instanceConfig{
			Brokers: s.brokers, Topic: s.topic, Group: s.group, DSN: s.dsn, Schema: s.schema, Member: s.member,
			Lanes: lanes, Pool: s.concurrency, SleepMS: s.sleepMS, HoldMS: s.holdMS, SessionMS: s.sessionMS,
		}.env()...)
	case sysPCKey, sysPCPartition, sysPlain:
		n := s.concurrency
		if s.system == sysPlain {
			n = min(n, s.partitions) // a KafkaConsumer per partition at most
		}
		cp := h.java.classpath
		if s.system != sysPlain {
			cp = h.java.pcClasspath
		}
		args := append(append([]string{}, javaFlags...), "-cp", cp, "compare.Main", s.system,
			"--brokers="+s.brokers, "--topic="+s.topic, "--group="+s.group,
			"--jdbc="+jdbcURL(s.dsn, s.schema)+"&ApplicationName="+appName(s.schema, s.member), "--member="+s.member,
			"--concurrency="+strconv.Itoa(n), "--sleep-ms="+strconv.Itoa(s.sleepMS), "--hold-ms="+strconv.Itoa(s.holdMS), "--session-ms="+strconv.Itoa(s.sessionMS))
		cmd = exec.Command(h.java.bin, args...)
	default:
		return nil, fmt.Errorf("compare: unknown system %q", s.system)
	}
	cmd, err := pinned(cmd, h.pin)
	if err != nil {
		return nil, err
	}
	in := &instance{spec: s, cmd: cmd, done: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, err
	}
	pw.Close()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			in.mu.Lock()
			in.out.WriteString(sc.Text())
			in.out.WriteByte('\n')
			in.mu.Unlock()
			if sc.Text() == "ready" {
				once.Do(func() { close(ready) })
			}
		}
		pr.Close()
		in.err = cmd.Wait()
		close(in.done)
	}()
	select {
	case <-ready:
		return in, nil
	case <-in.done:
		return nil, fmt.Errorf("compare: %s instance %s exited before it was ready: %v\n%s", s.system, s.member, in.err, tail(in.output(), 3000))
	case <-time.After(60 * time.Second):
		in.kill()
		return nil, fmt.Errorf("compare: %s instance %s not ready in 60s\n%s", s.system, s.member, tail(in.output(), 3000))
	case <-ctx.Done():
		in.kill()
		return nil, ctx.Err()
	}
}

func (in *instance) output() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.out.String()
}

// count returns how many lines of the instance's output start with prefix.
func (in *instance) count(prefix string) int {
	n := 0
	for _, l := range strings.Split(in.output(), "\n") {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func (in *instance) signal(sig syscall.Signal) error {
	if err := in.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("compare: %s instance %s: %v: %w (exit: %v)\n%s", in.spec.system, in.spec.member, sig, err, in.err, tail(in.output(), 3000))
	}
	return nil
}

// kill sends SIGKILL and waits for the process.
func (in *instance) kill() {
	_ = in.cmd.Process.Kill()
	<-in.done
}

// stop asks the instance to stop (SIGTERM, a clean close) and kills it
// after grace.
func (in *instance) stop(grace time.Duration) error {
	select {
	case <-in.done:
		return nil
	default:
	}
	_ = in.signal(syscall.SIGCONT) // a frozen instance cannot stop
	_ = in.signal(syscall.SIGTERM)
	select {
	case <-in.done:
		return nil
	case <-time.After(grace):
		in.kill()
		return errors.New("compare: " + in.spec.member + " did not stop in " + grace.String() + ": killed")
	}
}

// appName is the PostgreSQL application_name of member's connections in
// the run whose schema is schema (unique to the run), so that the harness
// can see in pg_stat_activity when member is inside a transaction.
func appName(schema, member string) string { return schema + "_" + member }

func jdbcURL(dsn, schema string) string {
	// postgres://user@host:port/db[?…] → jdbc:postgresql://host:port/db?user=user&currentSchema=schema
	rest := strings.TrimPrefix(strings.TrimPrefix(dsn, "postgres://"), "postgresql://")
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i]
	}
	user := ""
	if i := strings.IndexByte(rest, '@'); i >= 0 {
		user, rest = rest[:i], rest[i+1:]
	}
	pass := ""
	if i := strings.IndexByte(user, ':'); i >= 0 {
		user, pass = user[:i], user[i+1:]
	}
	u := "jdbc:postgresql://" + rest + "?currentSchema=" + schema
	if user != "" {
		u += "&user=" + user
	}
	if pass != "" {
		u += "&password=" + pass
	}
	return u
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
