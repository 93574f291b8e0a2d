package fencehttp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
)

func tk(epoch int32, member string) epochs.Token {
	return epochs.Token{Group: "g", Topic: "t", Partition: 0, Epoch: epoch, Member: member}
}

// TestScopeStateAdmits is the rule every store applies, case by case.
func TestScopeStateAdmits(t *testing.T) {
	fresh := fencehttp.ScopeState{Scope: tk(0, "").Scope(), Floor: fencehttp.NoFloor}
	plain := fencehttp.ScopeState{Scope: fresh.Scope, Token: tk(5, "a"), Floor: fencehttp.NoFloor}
	pinned := fencehttp.ScopeState{Scope: fresh.Scope, Token: tk(2, "h"), Floor: 9}
	lifted := fencehttp.ScopeState{Scope: fresh.Scope, Token: tk(10, "n"), Floor: 9}
	for _, c := range []struct {
		name string
		st   fencehttp.ScopeState
		tok  epochs.Token
		want bool
	}{
		{"fresh scope", fresh, tk(0, "a"), true},
		{"newer epoch", plain, tk(6, "b"), true},
		{"same tenure", plain, tk(5, "a"), true},
		{"same epoch other member", plain, tk(5, "b"), false},
		{"older epoch", plain, tk(4, "a"), false},
		{"pinned: the stored token", pinned, tk(2, "h"), true},
		{"pinned: the previous incarnation at the floor", pinned, tk(9, "old"), false},
		{"pinned: the holder's member at a higher epoch below the floor", pinned, tk(3, "h"), false},
		{"pinned: above the floor", pinned, tk(10, "n"), true},
		{"pinned: below the stored epoch", pinned, tk(1, "h"), false},
		{"lifted: older than the stored", lifted, tk(9, "old"), false},
		{"lifted: newer", lifted, tk(11, "m"), true},
	} {
		if got := c.st.Admits(c.tok); got != c.want {
			t.Errorf("%s: %+v admits %v: %v, want %v", c.name, c.st, c.tok, got, c.want)
		}
	}
	if !pinned.Pinned() || lifted.Pinned() || plain.Pinned() || fresh.Pinned() {
		t.Fatalf("Pinned: pinned %v lifted %v plain %v fresh %v", pinned.Pinned(), lifted.Pinned(), plain.Pinned(), fresh.Pinned())
	}
	if fe := pinned.Refusal(tk(9, "old")); !fe.Pinned || fe.Floor != 9 || fe.Stored != tk(2, "h") || !errors.Is(fe, fencehttp.ErrFenced) {
		t.Fatalf("pinned refusal %+v", fe)
	}
	if fe := plain.Refusal(tk(4, "a")); fe.Pinned || fe.Floor != fencehttp.NoFloor {
		t.Fatalf("plain refusal %+v", fe)
	}
}

func TestScopeStateAfterResetNeverLowersTheFloor(t *testing.T) {
	st := fencehttp.ScopeState{Scope: tk(0, "").Scope(), Token: tk(3, "h"), Floor: 9}
	after := st.AfterReset(fencehttp.ResetRequest{To: tk(4, "i"), Floor: 5})
	if after.Token != tk(4, "i") || after.Floor != 9 || after.Scope != st.Scope {
		t.Fatalf("after %+v", after)
	}
	first := fencehttp.ScopeState{Scope: st.Scope, Token: tk(9, "old"), Floor: fencehttp.NoFloor}.AfterReset(fencehttp.ResetRequest{To: tk(2, "h"), Floor: 9})
	if first.Floor != 9 || !first.Pinned() {
		t.Fatalf("first reset %+v", first)
	}
}

// TestFencedBodyCarriesTheFloor: the Guard's 409 for a pinned scope has
// a "floor" member, which CheckResponse reads back; an unpinned refusal
// has none.
func TestFencedBodyCarriesTheFloor(t *testing.T) {
	for _, fe := range []*fencehttp.FencedError{
		fencehttp.ScopeState{Token: tk(2, "h"), Floor: 9}.Refusal(tk(9, "old")),
		fencehttp.ScopeState{Token: tk(5, "a"), Floor: fencehttp.NoFloor}.Refusal(tk(4, "a")),
	} {
		g, err := fencehttp.New(fencehttp.Config{Store: refusingStore{fe}})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(g.Wrap(http.NotFoundHandler()))
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		if err := (fencehttp.Fence{Token: fe.Presented, Key: "k"}).SetHeaders(req.Header); err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var got *fencehttp.FencedError
		if !errors.As(fencehttp.CheckResponse(resp), &got) {
			t.Fatalf("no FencedError from %d", resp.StatusCode)
		}
		resp.Body.Close()
		srv.Close()
		if got.Pinned != fe.Pinned || got.Floor != fe.Floor || got.Stored != fe.Stored {
			t.Fatalf("read back %+v, want %+v", got, fe)
		}
		if fe.Pinned != strings.Contains(got.Error(), "admits only the stored token") {
			t.Fatalf("message %q for pinned=%v", got.Error(), fe.Pinned)
		}
	}
}

func TestResetRequestValidate(t *testing.T) {
	sc := tk(0, "").Scope()
	ok := fencehttp.ResetRequest{Scope: sc, Expect: fencehttp.ScopeState{Scope: sc, Token: tk(9, "old"), Floor: fencehttp.NoFloor}, To: tk(2, "h"), Floor: 9, Reason: "r"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*fencehttp.ResetRequest){
		"no reason":        func(r *fencehttp.ResetRequest) { r.Reason = " " },
		"floor below To":   func(r *fencehttp.ResetRequest) { r.Floor = 1 },
		"no To":            func(r *fencehttp.ResetRequest) { r.To = epochs.Token{} },
		"To of a scope":    func(r *fencehttp.ResetRequest) { r.To.Partition = 1 },
		"Expect elsewhere": func(r *fencehttp.ResetRequest) { r.Expect.Scope.Partition = 1 },
		"bad scope":        func(r *fencehttp.ResetRequest) { r.Scope.Group = "" },
		"bad Expect floor": func(r *fencehttp.ResetRequest) { r.Expect.Floor = -2 },
	} {
		r := ok
		mut(&r)
		if err := r.Validate(); !errors.Is(err, fencehttp.ErrBadReset) {
			t.Errorf("%s: %v, want ErrBadReset", name, err)
		}
	}
}

// refusingStore refuses every request with its error.
type refusingStore struct{ fe *fencehttp.FencedError }

func (s refusingStore) Begin(context.Context, epochs.Token, string) (fencehttp.Unit, *fencehttp.Result, error) {
	return nil, nil, s.fe
}
