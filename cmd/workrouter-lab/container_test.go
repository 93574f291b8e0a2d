package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workrouter/workrouter/cmd/internal/cluster"
	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/internal/testpg"
	"github.com/workrouter/workrouter/internal/testwait"
	"github.com/workrouter/workrouter/router"
)

// The container tests: the image of deploy/Dockerfile.local (the binary
// and base of deploy/Dockerfile, built without a registry) runs the
// embedded broker and the ledger example's workers as containers on the
// host network (every listener on 127.0.0.1), with the SQLite file on a
// mounted directory the image's nonroot user (65532) owns. The image holds
// the product binary alone: the broker and the harness's workers are this
// command, built static and mounted as the containers' entrypoint
// (/workrouter-lab), on the image's base and user. They need a
// container engine: without a healthy one they skip with a message,
// except under CI=true, where they fail.

// nonroot is the image's user and group (distroless's nonroot).
const nonroot = 65532

// docker runs the docker CLI and returns its trimmed standard output.
func docker(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// needEngine skips t (fails it under CI=true) without a healthy engine.
func needEngine(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	v, err := docker(ctx, "version", "--format", "{{.Server.Version}}")
	if err == nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true and no healthy container engine (.ci/run starts dockerd): %v", err)
	}
	t.Skipf("no healthy container engine (docker version: %q, %v): the container tests need one", v, err)
}

// staticLab builds this command, workrouter-lab, static (CGO_ENABLED=0,
// as the image's binary), so that it runs on the image's base, and
// returns its path.
func staticLab(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "workrouter-lab")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build ./cmd/workrouter-lab: %v\n%s", err, out)
	}
	return bin
}

// labIn is the docker run arguments that run lab, mounted, as the
// container's entrypoint instead of the image's /workrouter.
func labIn(lab string) []string {
	return []string{"-v", lab + ":/workrouter-lab:ro", "--entrypoint", "/workrouter-lab"}
}

// buildLocalImage builds deploy/Dockerfile.local from a context made by
// deploy/local-context.sh and returns its tag; WORKROUTER_TEST_IMAGE, if
// set, names an image already built that way (.ci/run builds it once).
func buildLocalImage(t *testing.T) string {
	t.Helper()
	if img := os.Getenv("WORKROUTER_TEST_IMAGE"); img != "" {
		return img
	}
	dir := t.TempDir()
	if out, err := exec.CommandContext(t.Context(), "bash", "../../deploy/local-context.sh", dir).CombinedOutput(); err != nil {
		t.Fatalf("deploy/local-context.sh: %v\n%s", err, out)
	}
	tag := "workrouter:test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := docker(t.Context(), "build", "-q", "-f", "../../deploy/Dockerfile.local", "-t", tag, dir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(context.Background(), "rmi", "-f", tag) })
	return tag
}

// containerWorld is one container test's broker container, sink, producer
// and worker containers.
type containerWorld struct {
	t      *testing.T
	image  string
	lab    string // the static workrouter-lab the containers run
	dir    string // the mounted directory: the SQLite file, hold files
	prefix string // of the containers' names
	addr   string // the broker container's
	store  *cluster.Store
	prod   *cluster.Producer
}

// newContainerWorld starts the broker container and opens the sink: SQLite
// in the mounted directory, or PostgreSQL at dsn if not empty.
func newContainerWorld(t *testing.T, image, lab, dsn string) *containerWorld {
	t.Helper()
	dir := t.TempDir()
	w := &containerWorld{t: t, image: image, lab: lab, dir: dir, prefix: "wr-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	// The broker: `workrouter-lab broker` in the image, on a port it picks.
	name := w.prefix + "-broker"
	args := append(append([]string{"run", "-d", "--name", name, "--network", "host"}, labIn(lab)...), image,
		"broker", "--listen", "127.0.0.1:0", "--topic", ledger.Topic, "--partitions", strconv.Itoa(procPartitions),
		"--min-session-timeout", "100ms")
	if _, err := docker(t.Context(), args...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { docker(context.Background(), "rm", "-f", name) })
	testwait.For(t, 60*time.Second, "the broker container to listen", func() bool {
		logs, _ := exec.Command("docker", "logs", name).Output()
		for _, line := range strings.Split(string(logs), "\n") {
			if a, ok := strings.CutPrefix(line, "workrouter broker listening on "); ok {
				w.addr, _, _ = strings.Cut(a, " ")
				return true
			}
		}
		return false
	})
	if !strings.HasPrefix(w.addr, "127.0.0.1:") {
		t.Fatalf("the broker container listens on %q, want 127.0.0.1", w.addr)
	}
	st, err := cluster.OpenStore(t.Context(), cluster.StoreConfig{Dir: dir, PostgresDSN: dsn, SchemaPrefix: "wr_containers"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	w.store = st
	// The nonroot user of the image writes the SQLite file (and its WAL
	// and shared-memory files) that the test, as root, created.
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, nonroot, nonroot)
	}); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(t.Context(), router.Config{Brokers: []string{w.addr}, Topic: ledger.Topic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	w.prod = cluster.NewProducer(rt, 7, 40)
	return w
}

// start runs the harness's worker named name in a container of the image
// (docker run, attached: its events on its standard output).
func (w *containerWorld) start(name string, hooks ...string) *cluster.Worker {
	w.t.Helper()
	cname := w.prefix + "-" + name
	opts := cluster.WorkerOptions{Brokers: []string{w.addr}, Topic: ledger.Topic, Group: "workers",
		SinkSpec: w.store.WorkerSpec(name), Name: name, SessionTimeout: 2 * time.Second, MaxBatch: 64,
		RebalanceTimeout: 5 * time.Second, Hooks: hooks, EventsPath: "/dev/stdout"}
	bin := cluster.Binary{EventsOnStdout: true, Argv: []string{"docker", "run", "--rm", "--name", cname,
		"--network", "host", "-v", w.dir + ":" + w.dir, "-e", cluster.EnvHarnessWorker + "=1"}}
	bin.Argv = append(append(bin.Argv, labIn(w.lab)...), w.image)
	log := &syncLog{}
	wk, err := cluster.StartWorker(name, bin, log, opts.Args()...)
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		docker(context.Background(), "rm", "-f", cname)
		<-wk.Done()
		if w.t.Failed() {
			w.t.Logf("worker container %s log (tail):\n%s", cname, tail(log.String(), 4000))
		}
	})
	return wk
}

// container is the name of worker name's container.
func (w *containerWorld) container(name string) string { return w.prefix + "-" + name }

func (w *containerWorld) produce(n int) {
	w.t.Helper()
	if err := w.prod.Send(context.Background(), n); err != nil {
		w.t.Fatal(err)
	}
}

func (w *containerWorld) postings(where string, args ...any) int {
	n, err := w.store.Count(context.Background(), `SELECT count(*) FROM ledger_postings`+where, args...)
	if err != nil {
		return -1
	}
	return n
}

func (w *containerWorld) waitAllApplied() {
	w.t.Helper()
	want := w.prod.AckedCount()
	testwait.For(w.t, 120*time.Second, fmt.Sprintf("all %d commands applied", want), func() bool { return w.postings("") >= want })
}

// stop stops a worker's container with `docker stop` (SIGTERM) and checks
// that it left cleanly: exit status 0 and a stopped event without error.
func (w *containerWorld) stop(wk *cluster.Worker) {
	w.t.Helper()
	if _, err := docker(w.t.Context(), "stop", "-t", "20", w.container(wk.Name())); err != nil {
		w.t.Fatal(err)
	}
	<-wk.Done()
	if wk.ExitCode() != 0 || wk.Count(consumer.KindStopped) != 1 || len(wk.Errors()) > 0 {
		w.t.Fatalf("worker container %s did not leave cleanly on docker stop: exit %d, %d stopped events, errors %v",
			wk.Name(), wk.ExitCode(), wk.Count(consumer.KindStopped), wk.Errors())
	}
}

// check verifies F, L, O, X (and the rest) from the sink with the shared
// checker and returns the violations' count.
func (w *containerWorld) check() {
	w.t.Helper()
	converged := cluster.WaitUntil(w.t.Context(), 60*time.Second, "Kafka lag to reach zero", func() bool {
		return cluster.LagZero(w.t.Context(), []string{w.addr}, ledger.Topic, "workers")
	})
	rep, err := w.store.Check(w.t.Context(), cluster.CheckConfig{Brokers: []string{w.addr}, Group: "workers", Topic: ledger.Topic,
		Partitions: procPartitions, Acked: w.prod.Acked(), NotConverged: converged != nil})
	if err != nil {
		w.t.Fatal(err)
	}
	if rep.Total() != 0 {
		w.t.Fatalf("invariants violated: %+v\n%s", rep.Violations, strings.Join(rep.Notes(20), "\n"))
	}
}

// TestContainers runs the local image: `workrouter version` as its
// nonroot user, the broker and three ledger workers as containers that
// stop cleanly on docker stop (on SQLite in the mounted directory, and on
// PostgreSQL, which skips without one except under CI=true), and a worker container frozen with docker
// pause past its session timeout whose late write is rejected. Its last
// log line is the figures .ci/run prints.
func TestContainers(t *testing.T) {
	needEngine(t)
	image := buildLocalImage(t)
	lab := staticLab(t)
	commands, stale := 0, 0

	t.Run("version", func(t *testing.T) {
		out, err := docker(t.Context(), "run", "--rm", "--network", "host", image, "version")
		if err != nil || !strings.HasPrefix(out, "workrouter ") {
			t.Fatalf("workrouter version in the image: %q, %v", out, err)
		}
		user, err := docker(t.Context(), "inspect", "-f", "{{.Config.User}} {{json .Config.Entrypoint}}", image)
		if err != nil || user != `65532:65532 ["/workrouter"]` {
			t.Fatalf("image user and entrypoint: %q, %v", user, err)
		}
		// The image's binary is the product: the lab's commands are not
		// there.
		if out, err := docker(t.Context(), "run", "--rm", "--network", "host", image, "broker"); err == nil || !strings.Contains(err.Error(), `unknown command "broker"`) {
			t.Fatalf("workrouter broker in the image: %q, %v; want an unknown command", out, err)
		}
	})

	ledgerRun := func(t *testing.T, dsn string) {
		w := newContainerWorld(t, image, lab, dsn)
		ws := []*cluster.Worker{w.start("a"), w.start("b"), w.start("c")}
		testwait.For(t, 60*time.Second, "the three containers to share the partitions", func() bool {
			owned := 0
			for _, wk := range ws {
				if len(wk.Owned()) == 0 {
					return false
				}
				owned += len(wk.Owned())
			}
			return owned == procPartitions
		})
		w.produce(1500)
		w.waitAllApplied()
		for _, wk := range ws {
			w.stop(wk)
		}
		w.check()
		commands += w.prod.AckedCount()
	}
	t.Run("ledger", func(t *testing.T) { ledgerRun(t, "") })
	t.Run("ledger-postgres", func(t *testing.T) { ledgerRun(t, testpg.DSN(t)) })

	t.Run("pause", func(t *testing.T) {
		w := newContainerWorld(t, image, lab, "")
		hold := filepath.Join(w.dir, "release-a")
		a := w.start("a", "--freeze-before-batch=3", "--freeze-hold-file", hold)
		testwait.For(t, 60*time.Second, "a to claim every partition", func() bool { return len(a.Owned()) == procPartitions })
		b := w.start("b")
		testwait.For(t, 60*time.Second, "b to claim partitions", func() bool { return len(b.Owned()) > 0 })
		w.produce(2000)
		testwait.For(t, 60*time.Second, "a to hold a batch", func() bool { return len(a.Freezes()) > 0 })
		fz := a.Freezes()[0]
		if _, err := docker(t.Context(), "pause", w.container("a")); err != nil {
			t.Fatal(err)
		}
		paused := func() bool {
			s, err := docker(t.Context(), "inspect", "-f", "{{.State.Paused}}", w.container("a"))
			return err == nil && s == "true"
		}
		if !paused() {
			t.Fatal("docker pause returned but the container is not paused")
		}
		// The new owner claims a's partition at a higher epoch and applies
		// there while a's container is frozen.
		testwait.For(t, 60*time.Second, "b to take over the partition and apply", func() bool {
			c, ok := b.Owned()[fz.Partition]
			return ok && c.Epoch > fz.Epoch && w.postings(` WHERE part = $1 AND epoch = $2 AND member = $3`, fz.Partition, c.Epoch, c.Member) > 0
		})
		if !paused() {
			t.Fatal("a's container was unpaused before the takeover")
		}
		if err := os.WriteFile(hold, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := docker(t.Context(), "unpause", w.container("a")); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 60*time.Second, "a's late batch to be decided", func() bool {
			if a.FencedCount() > 0 {
				return true
			}
			for _, r := range a.Applied() {
				if r.Partition == fz.Partition && r.Epoch == fz.Epoch && r.FirstOffset == fz.First {
					return true
				}
			}
			return false
		})
		w.produce(500)
		w.waitAllApplied()
		if a.FencedCount() < 1 {
			t.Fatal("no stale write of the paused container was rejected")
		}
		if n := w.postings(` WHERE part = $1 AND epoch = $2 AND member = $3 AND off >= $4`, fz.Partition, fz.Epoch, fz.Member, fz.First); n > 0 {
			t.Fatalf("the paused container's batch landed: %d postings at epoch %d from offset %d", n, fz.Epoch, fz.First)
		}
		w.stop(a)
		w.stop(b)
		w.check()
		commands += w.prod.AckedCount()
		stale += a.FencedCount() + b.FencedCount()
	})
	if !t.Failed() {
		t.Logf("containers: commands=%d stale_rejected=%d violations=0", commands, stale)
	}
}
