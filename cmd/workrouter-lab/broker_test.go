package main

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/cmd/internal/clitest"
)

// TestBrokerAdvertise: `broker --listen 0.0.0.0:P --advertise HOST:0`
// sends clients to HOST:P (it used to send them to [::]:P, that is to
// themselves), says so on its first line, and warns that it is exposed
// without authentication.
func TestBrokerAdvertise(t *testing.T) {
	p, addr, line := startBroker(t, []string{"--listen", "0.0.0.0:0", "--advertise", "broker.example.test:0", "--topic", "t"})
	_, port, _ := net.SplitHostPort(addr)
	want := "broker.example.test:" + port
	if !strings.Contains(line, "advertised as "+want) {
		t.Fatalf("first line %q does not say it advertises %s", line, want)
	}

	// The advertised name does not resolve here: every connection goes
	// to the broker's port on loopback, whatever the client was told.
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:"+port), kgo.Dialer(func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, "127.0.0.1:"+port)
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clitest.Deadline)
	defer cancel()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Brokers) != 1 {
		t.Fatalf("metadata lists %d brokers", len(resp.Brokers))
	}
	if got := net.JoinHostPort(resp.Brokers[0].Host, fmt.Sprint(resp.Brokers[0].Port)); got != want {
		t.Fatalf("metadata sends clients to %s, want %s", got, want)
	}
	p.Interrupt(t)
	if !strings.Contains(p.Stderr.String(), "listens beyond this machine with no authentication") {
		t.Fatalf("no warning that the exposed broker has no authentication; stderr:\n%s", p.Stderr)
	}
}

// TestBrokerRefusesUnusableListen: every interface without --advertise,
// and an empty --topic, exit 1 with one line that says what to do.
func TestBrokerRefusesUnusableListen(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"broker", "--listen", "0.0.0.0:0"}, []string{`listen address "0.0.0.0:0" is every interface`, "--advertise HOST:PORT"}},
		{[]string{"broker", "--listen", "[::]:0"}, []string{"every interface", "--advertise HOST:PORT"}},
		{[]string{"broker", "--listen", "0.0.0.0:0", "--advertise", "0.0.0.0:9092"}, []string{`advertised address "0.0.0.0:9092" names no host`}},
		{[]string{"broker", "--listen", "127.0.0.1:0", "--advertise", "nohost"}, []string{`advertised address "nohost" is not host:port`}},
		{[]string{"broker", "--listen", "127.0.0.1:0", "--topic", ""}, []string{"empty topic name"}},
		{[]string{"broker", "--listen", "127.0.0.1:0", "--topic", "a,,b"}, []string{`--topic "a,,b" has an empty topic name`}},
	} {
		t.Run(strings.Join(tc.args[1:], "_"), func(t *testing.T) { oneLineFailure(t, tc.args, tc.want...) })
	}
}

// TestBrokerBindErrorReadsWell: a broker whose metrics listener cannot
// bind fails with a last line naming the flag and the address, and no "%!w(<nil>)" for the
// close that succeeded after it.
func TestBrokerBindErrorReadsWell(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	p := clitest.Start(t, []string{"broker", "--listen", "127.0.0.1:0", "--metrics-addr", addr})
	if code := p.Wait(t); code == 0 {
		t.Fatalf("exit code 0 with the metrics address taken; stderr:\n%s", p.Stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(p.Stderr.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "workrouter-lab: --metrics-addr: ") || !strings.Contains(last, addr) || strings.Contains(p.Stderr.String(), "%!") {
		t.Fatalf("the failure reads %q, want one line naming --metrics-addr and %s, without a formatting error", last, addr)
	}
}

// TestBrokerMessageNamesNoGoIdentifiers: the library's error for a broker
// listening on every interface reaches the user without the library's Go
// identifiers, as the product's messages do (cmd/internal/cli's
// TestCLIMessagesNameNoGoIdentifiers, whose pattern this is).
func TestBrokerMessageNamesNoGoIdentifiers(t *testing.T) {
	goIdentifiers := regexp.MustCompile(`\b(Config\.\w+|Command\.\w+|kgo\.\w+|DeadLetterTopic|ClientOpts|KeyConcurrency|ProducerBatchMaxBytes)\b`)
	_, stderr, err := runCLI(t, nil, "broker", "--listen", "0.0.0.0:0")
	if err == nil {
		t.Fatal("broker --listen 0.0.0.0:0: no error")
	}
	for _, msg := range []string{err.Error(), stderr} {
		if m := goIdentifiers.FindString(msg); m != "" {
			t.Errorf("message names the Go identifier %s: %q", m, msg)
		}
	}
	t.Logf("broker: %v", err)
}
