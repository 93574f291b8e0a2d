package kafkacluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrNotRunning is returned by a Node's Stop, Kill, Pause and Resume when
// its process is not running.
var ErrNotRunning = errors.New("kafkacluster: the node is not running")

// Node is one process of a cluster: a broker and a KRaft controller.
type Node struct {
	// ID is the node ID (node.id), 1 to the cluster's size.
	ID int32
	// Addr is the node's broker address for clients, 127.0.0.1:port: the
	// broker listener, or with Config.Links the client link's address.
	// It stays the same across restarts.
	Addr string
	// Listener is the broker listener itself: Addr unless Config.Links
	// routes clients through a link.
	Listener string
	// ControllerAddr is the controller listener (with Config.Links on
	// several nodes, CONTROLLER_i of node i: the one it reaches itself
	// at).
	ControllerAddr string
	// Dir is the node's directory: server.properties, data/ and
	// server.log.
	Dir string
	// LogFile is the node's log (the JVM's standard output and error,
	// Log4j's lines among them), appended to across restarts.
	LogFile string

	c *Cluster
	// With Config.Links on several nodes: replListen[j-1] and
	// ctrlListen[j-1] are the listeners REPLICATION_j and CONTROLLER_j
	// (node j's ways in), replAdv[j-1] and ctrlAdv[j-1] the addresses
	// they are advertised at (node j's links to this node).
	replListen, replAdv, ctrlListen, ctrlAdv []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed once cmd has exited
	paused bool
}

func (n *Node) propsFile() string { return filepath.Join(n.Dir, "server.properties") }
func (n *Node) dataDir() string   { return filepath.Join(n.Dir, "data") }

// jvmArgs returns the java command line up to the main class.
func (n *Node) jvmArgs(opts []string) []string {
	args := append([]string(nil), opts...)
	level := n.c.cfg.GroupLogLevel
	if level == "" {
		level = "INFO"
	}
	return append(args,
		"-Dlog4j2.configurationFile="+n.c.log4jFile(),
		"-Dworkrouter.kafka.group.level="+level,
		"-Dkafka.logs.dir="+n.Dir,
		"-cp", n.c.install.Classpath())
}

func (n *Node) jvmOptions() []string {
	if n.c.cfg.JVMOptions != nil {
		return n.c.cfg.JVMOptions
	}
	return DefaultJVMOptions
}

// format runs StorageTool format on the node's directory.
func (n *Node) format(ctx context.Context, clusterID string, standalone bool) error {
	args := n.jvmArgs([]string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData"})
	args = append(args, "kafka.tools.StorageTool", "format", "--cluster-id", clusterID, "--config", n.propsFile())
	if standalone {
		args = append(args, "--standalone")
	}
	cmd := exec.CommandContext(ctx, n.c.install.Java, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kafkacluster: formatting node %d's storage (%s): %v\n%s", n.ID, n.propsFile(), err, tail(out.String(), 20))
	}
	return nil
}

// start starts the node's process; the caller waits for readiness.
func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("kafkacluster: node %d is already running", n.ID)
	}
	lf, err := os.OpenFile(n.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer lf.Close() // the child has its own descriptor
	fmt.Fprintf(lf, "=== kafkacluster: starting node %d at %s\n", n.ID, time.Now().Format(time.RFC3339Nano))
	args := append(n.jvmArgs(n.jvmOptions()), "kafka.Kafka", n.propsFile())
	cmd := exec.Command(n.c.install.Java, args...)
	cmd.Dir = n.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = sysProcAttr(n.c.cfg.Detached)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("kafkacluster: starting node %d: %w", n.ID, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	n.cmd, n.done, n.paused = cmd, done, false
	n.c.logf("kafkacluster: node %d (pid %d) starting on %s, log %s", n.ID, cmd.Process.Pid, n.Addr, n.LogFile)
	return nil
}

// running returns the node's process and its exit channel, or
// ErrNotRunning. A process that has exited is forgotten.
func (n *Node) running() (*exec.Cmd, chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil, nil, ErrNotRunning
	}
	select {
	case <-n.done:
		n.cmd, n.done, n.paused = nil, nil, false
		return nil, nil, ErrNotRunning
	default:
	}
	return n.cmd, n.done, nil
}

// forget clears the process once it has exited.
func (n *Node) forget(done chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == done {
		n.cmd, n.done, n.paused = nil, nil, false
	}
}

// Running reports whether the node's process is alive (paused or not).
func (n *Node) Running() bool {
	_, _, err := n.running()
	return err == nil
}

// Paused reports whether the node is stopped by Pause.
func (n *Node) Paused() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil && n.paused
}

// PID returns the process ID, or 0 when the node is not running.
func (n *Node) PID() int {
	cmd, _, err := n.running()
	if err != nil {
		return 0
	}
	return cmd.Process.Pid
}

// Stop asks the node to shut down (SIGTERM: a controlled shutdown, which
// moves its leaderships away first) and waits for it to exit; if ctx is
// done first it kills it.
func (n *Node) Stop(ctx context.Context) error {
	cmd, done, err := n.running()
	if err != nil {
		return err
	}
	n.c.logf("kafkacluster: stopping node %d (pid %d)", n.ID, cmd.Process.Pid)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if n.Paused() {
		signalResume(cmd.Process) // a stopped process acts on SIGTERM once continued
	}
	select {
	case <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
	}
	n.forget(done)
	return nil
}

// Kill kills the node with SIGKILL, as a crash would, and waits for it to
// exit.
func (n *Node) Kill() error {
	cmd, done, err := n.running()
	if err != nil {
		return err
	}
	n.c.logf("kafkacluster: killing node %d (pid %d)", n.ID, cmd.Process.Pid)
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	<-done
	n.forget(done)
	return nil
}

// Pause stops the node's process with SIGSTOP: it keeps its sockets but
// answers nothing, as a frozen VM or a long GC pause.
func (n *Node) Pause() error {
	cmd, _, err := n.running()
	if err != nil {
		return err
	}
	if err := signalPause(cmd.Process); err != nil {
		return err
	}
	n.mu.Lock()
	n.paused = true
	n.mu.Unlock()
	n.c.logf("kafkacluster: paused node %d (pid %d)", n.ID, cmd.Process.Pid)
	return nil
}

// Resume continues a node stopped by Pause (SIGCONT).
func (n *Node) Resume() error {
	cmd, _, err := n.running()
	if err != nil {
		return err
	}
	if err := signalResume(cmd.Process); err != nil {
		return err
	}
	n.mu.Lock()
	n.paused = false
	n.mu.Unlock()
	n.c.logf("kafkacluster: resumed node %d (pid %d)", n.ID, cmd.Process.Pid)
	return nil
}

// Start starts a node that was stopped or killed, on the same addresses
// and data, and waits until the cluster is ready again.
func (n *Node) Start(ctx context.Context) error {
	if err := n.start(); err != nil {
		return err
	}
	return n.c.WaitReady(ctx)
}

// Restart stops the node (Stop, bounded by ctx) if it is running, starts
// it again on the same addresses and data, and waits until the cluster is
// ready again.
func (n *Node) Restart(ctx context.Context) error {
	if err := n.Stop(ctx); err != nil && !errors.Is(err, ErrNotRunning) {
		return err
	}
	return n.Start(ctx)
}

// Tail returns the last lines of the node's log.
func (n *Node) Tail(lines int) string {
	b, err := os.ReadFile(n.LogFile)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), lines)
}

// newClusterID returns a cluster ID as Kafka's Uuid.randomUuid makes one:
// 16 random bytes in unpadded URL-safe base64, never starting with '-'
// (which the tools would read as an option).
func newClusterID() (string, error) {
	for {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", err
		}
		id := base64.RawURLEncoding.EncodeToString(b[:])
		if id[0] != '-' {
			return id, nil
		}
	}
}
