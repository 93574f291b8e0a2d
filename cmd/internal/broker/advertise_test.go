package broker_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/cmd/internal/broker"
)

// metadataBrokers returns the host:port of every broker a Metadata and a
// FindCoordinator response name, asked on the connection to addr.
func metadataBrokers(t *testing.T, addr string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := &rawConn{t: t, c: c, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("raw-test"))}
	md := kmsg.NewPtrMetadataRequest()
	md.Version = 1
	resp, err := r.request(md)
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	var got []string
	for _, b := range resp.(*kmsg.MetadataResponse).Brokers {
		got = append(got, net.JoinHostPort(b.Host, fmt.Sprint(b.Port)))
	}
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version, fc.CoordinatorKey = 1, "g"
	if resp, err = r.request(fc); err != nil {
		t.Fatalf("FindCoordinator: %v", err)
	}
	co := resp.(*kmsg.FindCoordinatorResponse)
	return append(got, net.JoinHostPort(co.Host, fmt.Sprint(co.Port)))
}

// TestAdvertise: clients are sent to the advertised address, not to the
// listener's (which, for every interface, is "[::]:P": a client on
// another machine would bootstrap and then connect to itself).
func TestAdvertise(t *testing.T) {
	for _, tc := range []struct {
		listen, advertise string
		want              func(port string) string
	}{
		{"0.0.0.0:0", "broker.example.test:0", func(p string) string { return "broker.example.test:" + p }},
		{"[::]:0", "broker.example.test:0", func(p string) string { return "broker.example.test:" + p }},
		{"127.0.0.1:0", "10.1.2.3:19093", func(string) string { return "10.1.2.3:19093" }},
		{"127.0.0.1:0", "", func(p string) string { return "127.0.0.1:" + p }},
	} {
		t.Run(tc.listen+"/"+tc.advertise, func(t *testing.T) {
			b := start(t, broker.Config{Listen: tc.listen, Advertise: tc.advertise})
			_, port, err := net.SplitHostPort(b.Addr())
			if err != nil {
				t.Fatal(err)
			}
			want := tc.want(port)
			if b.Advertised() != want {
				t.Fatalf("Advertised() = %q, want %q", b.Advertised(), want)
			}
			for _, got := range metadataBrokers(t, net.JoinHostPort("127.0.0.1", port)) {
				if got != want {
					t.Fatalf("the broker sends clients to %s, want %s", got, want)
				}
			}
		})
	}
}

// TestEveryInterfaceNeedsAdvertise: the refusal says what to do.
func TestEveryInterfaceNeedsAdvertise(t *testing.T) {
	b, err := broker.Start(broker.Config{Listen: "0.0.0.0:0"})
	if err == nil {
		b.Close()
		t.Fatal("Start on 0.0.0.0 without Advertise succeeded")
	}
	if !strings.Contains(err.Error(), "--advertise HOST:PORT") {
		t.Fatalf("error %q does not say to pass --advertise", err)
	}
}
