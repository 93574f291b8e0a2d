package main

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
)

// TestRoutedDialer: a routed address is dialled through its route; an
// address without one is dialled directly and reported once, those
// dialled before report is called (the Kafka sink's clients dial before
// the worker's events exist) when it is.
func TestRoutedDialer(t *testing.T) {
	var dialled []string
	errDial := errors.New("no dial in this test")
	d := newRoutedDialer(map[string]string{"10.0.0.1:9092": "127.0.0.1:4001"}, func(_ context.Context, _, addr string) (net.Conn, error) {
		dialled = append(dialled, addr)
		return nil, errDial
	})
	ctx := context.Background()
	for _, a := range []string{"10.0.0.1:9092", "10.0.0.2:9092", "10.0.0.2:9092"} {
		if _, err := d.DialContext(ctx, "tcp", a); !errors.Is(err, errDial) {
			t.Fatalf("dial %s: %v", a, err)
		}
	}
	var reported []string
	d.report(func(addr string) { reported = append(reported, addr) })
	if !slices.Equal(reported, []string{"10.0.0.2:9092"}) {
		t.Fatalf("reported %v before report, want the unmapped address once", reported)
	}
	for _, a := range []string{"10.0.0.2:9092", "10.0.0.3:9092"} {
		_, _ = d.DialContext(ctx, "tcp", a)
	}
	if !slices.Equal(reported, []string{"10.0.0.2:9092", "10.0.0.3:9092"}) {
		t.Fatalf("reported %v, want each unmapped address once", reported)
	}
	if want := []string{"127.0.0.1:4001", "10.0.0.2:9092", "10.0.0.2:9092", "10.0.0.2:9092", "10.0.0.3:9092"}; !slices.Equal(dialled, want) {
		t.Fatalf("dialled %v, want %v", dialled, want)
	}
}
