package epochs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/workrouter/workrouter/epochs"
)

func tok(epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "g", Topic: "t", Partition: 3, Epoch: epoch, Member: member}
}

func TestCanClaim(t *testing.T) {
	cases := []struct {
		name    string
		holder  epochs.Token
		offered epochs.Token
		want    bool
	}{
		{"no holder", epochs.Token{}, tok(1, "a"), true},
		{"higher epoch", tok(1, "a"), tok(2, "b"), true},
		{"lower epoch", tok(5, "a"), tok(4, "a"), false},
		{"same tenure re-claims", tok(5, "a"), tok(5, "a"), true},
		{"same epoch other member", tok(5, "a"), tok(5, "b"), false},
		{"epoch zero first claim", epochs.Token{}, tok(0, "a"), true},
	}
	for _, c := range cases {
		if got := c.offered.CanClaim(c.holder); got != c.want {
			t.Errorf("%s: CanClaim = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestHolds(t *testing.T) {
	if !tok(2, "a").Holds(tok(2, "a")) {
		t.Fatal("identical token must hold")
	}
	for _, other := range []epochs.Token{tok(3, "a"), tok(2, "b"), {}} {
		if tok(2, "a").Holds(other) {
			t.Fatalf("%v must not hold %v", tok(2, "a"), other)
		}
	}
}

func TestValidate(t *testing.T) {
	bad := []epochs.Token{
		{Topic: "t", Member: "m"},
		{Group: "g", Member: "m"},
		{Group: "g", Topic: "t", Partition: -1, Member: "m"},
		{Group: "g", Topic: "t", Epoch: -1, Member: "m"},
		{Group: "g", Topic: "t"},
	}
	for _, b := range bad {
		if err := b.Validate(); !errors.Is(err, epochs.ErrInvalidToken) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidToken", b, err)
		}
	}
	if err := tok(0, "m").Validate(); err != nil {
		t.Fatalf("valid token refused: %v", err)
	}
}

func TestCodecRoundTrip(t *testing.T) {
	for _, in := range []epochs.Token{
		{},
		tok(7, "member-1"),
		{Group: "ledger", Topic: "commands", Partition: 1<<31 - 1, Epoch: -1 << 31, Member: "m"},
	} {
		k, v, err := in.Header()
		if err != nil {
			t.Fatal(err)
		}
		if k != epochs.HeaderKey {
			t.Fatalf("header key %q", k)
		}
		out, err := epochs.FromHeader(v)
		if err != nil {
			t.Fatalf("decode %x: %v", v, err)
		}
		if out != in {
			t.Fatalf("round trip: got %+v want %+v", out, in)
		}
	}
}

func TestCodecRejectsGarbage(t *testing.T) {
	good, _ := tok(1, "m").MarshalBinary()
	for _, b := range [][]byte{nil, {0}, {2}, good[:len(good)-1], append(append([]byte{}, good...), 0)} {
		if _, err := epochs.FromHeader(b); !errors.Is(err, epochs.ErrInvalidToken) {
			t.Errorf("FromHeader(%x) = %v, want ErrInvalidToken", b, err)
		}
	}
	long := epochs.Token{Group: string(make([]byte, epochs.MaxFieldLen+1))}
	if _, err := long.MarshalBinary(); !errors.Is(err, epochs.ErrInvalidToken) {
		t.Fatalf("oversized field accepted: %v", err)
	}
}

func FuzzCodec(f *testing.F) {
	seed, _ := tok(9, "member").MarshalBinary()
	f.Add(seed)
	f.Add([]byte{1, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		tk, err := epochs.FromHeader(b)
		if err != nil {
			if !errors.Is(err, epochs.ErrInvalidToken) {
				t.Fatalf("error does not match ErrInvalidToken: %v", err)
			}
			return
		}
		again, err := tk.MarshalBinary()
		if err != nil {
			t.Fatalf("re-encode of decoded token: %v", err)
		}
		back, err := epochs.FromHeader(again)
		if err != nil || back != tk {
			t.Fatalf("round trip of %+v: %+v, %v", tk, back, err)
		}
	})
}

func ExampleToken_CanClaim() {
	old := epochs.Token{Group: "billing", Topic: "commands", Partition: 0, Epoch: 4, Member: "worker-a"}
	next := epochs.Token{Group: "billing", Topic: "commands", Partition: 0, Epoch: 6, Member: "worker-b"}
	fmt.Println(next.CanClaim(old), old.CanClaim(next), next.Holds(old))
	// Output: true false false
}
