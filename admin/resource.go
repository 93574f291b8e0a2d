package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/fencehttp"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
)

// Errors of a resource's reset (ResetResource, PlanResources), each
// matched by errors.Is; a plan's Err matches one of them.
var (
	// ErrNoHolder: the sink has no holder for the scope (no fence, or a
	// fence reset and not claimed since): there is no tenure to pin the
	// store to. Wait for the worker's claim, then plan again.
	ErrNoHolder = errors.New("admin: the sink has no holder for this scope")
	// ErrStoreAdmits: the store already admits the sink's holder: there
	// is no reason to reset its scope.
	ErrStoreAdmits = errors.New("admin: the resource's store already admits the sink's holder")
	// ErrNoSinkReset: the sink's history of the scope has no reset and no
	// takeover, so nothing says where the group's previous incarnation
	// ends, and the floor could not keep its members out. Resolve the
	// sink's fence first (`workrouter fences reset`, or the worker's
	// takeover).
	ErrNoSinkReset = errors.New("admin: the sink's history of this scope has no reset or takeover")
)

// ResourceSink is what a resource's reset needs from the worker's sink:
// its fences (the holder) and their history (the epochs of the group's
// previous incarnations, up to the last reset or takeover).
type ResourceSink interface {
	fenceadmin.Lister
	fenceadmin.Historian
}

// ResourcePlanRequest is a dry run of resets of a resource's store: which
// scopes.
type ResourcePlanRequest struct {
	Group, Topic string
	// Partitions are the partitions to plan; nil plans every partition of
	// Group and Topic that the sink has a fence for.
	Partitions []int32
}

// ResourceRefusal names why a planned reset of a store's scope would be
// refused ("" if it would proceed).
type ResourceRefusal string

// The refusals of a resource's plan.
const (
	// ResourceRefusedNoHolder: the sink has no holder (ErrNoHolder).
	ResourceRefusedNoHolder ResourceRefusal = "no_holder"
	// ResourceRefusedStoreAdmits: the store admits the holder already
	// (ErrStoreAdmits).
	ResourceRefusedStoreAdmits ResourceRefusal = "store_admits"
	// ResourceRefusedNoSinkReset: the sink's history has no reset or
	// takeover (ErrNoSinkReset).
	ResourceRefusedNoSinkReset ResourceRefusal = "no_sink_reset"
)

// ResourcePlan is one scope of a resource's store next to the worker's
// sink, and what a reset of it would do.
type ResourcePlan struct {
	Scope epochs.Scope
	// Store is the store's state of the scope as read.
	Store fencehttp.ScopeState
	// Holder is the sink's holder: the token the reset stores.
	Holder epochs.Token
	// Floor is the reset's floor: the highest of the store's token epoch,
	// the store's floor, and every epoch in the sink's history up to its
	// last reset or takeover (the group's previous incarnations).
	Floor int32
	// HistoryFloor is the highest epoch of the sink's history up to its
	// last reset or takeover (-1 if none), and LastReset that entry (zero
	// if none).
	HistoryFloor int32
	LastReset    fenceadmin.Entry
	// After is the store's state after the reset (zero if refused).
	After fencehttp.ScopeState
	// Expect is ResourceExpect of the plan: a ResourceRequest carrying it
	// proceeds only if neither the store nor the sink moved meanwhile.
	Expect string
	// Refused says why the reset would be refused ("" if it would
	// proceed), and Err is the error ResetResource would return then.
	Refused ResourceRefusal
	Err     error
}

// ResourceExpect is a short, stable digest of what a resource's reset
// decides on: the store's state, the token it would store and the
// floor. An operator copies it from the dry run and gives it back.
func ResourceExpect(st fencehttp.ScopeState, to epochs.Token, floor int32) string {
	h := sha256.Sum256(fmt.Appendf(nil, "%d\x00%s\x00%d\x00%d\x00%s\x00%d", st.Token.Epoch, st.Token.Member, st.Floor, to.Epoch, to.Member, floor))
	return hex.EncodeToString(h[:4])
}

// PlanResources is the dry run of resets of a resource's store
// (docs/fenced-resources.md, "Resetting a store's scope"): for each scope
// of req, it reads the store's state and the sink's holder and history,
// and says what a reset would store (the sink's holder, pinned below the
// floor), its expect token, and whether it would be refused and why —
// the rules ResetResource applies, which it takes from here. It changes
// nothing. The plans are in the sink's order of the fences; a requested
// partition the sink has no fence for is planned as refused
// (ErrNoHolder). It may be called from any goroutine.
func PlanResources(ctx context.Context, store fencehttp.ScopeResetter, s ResourceSink, req ResourcePlanRequest) ([]ResourcePlan, error) {
	all, err := s.Fences(ctx)
	if err != nil {
		return nil, fmt.Errorf("admin: reading the sink's fences: %w", err)
	}
	var fences []sink.Fence
	for _, f := range all {
		if f.Scope.Group == req.Group && f.Scope.Topic == req.Topic && (req.Partitions == nil || slices.Contains(req.Partitions, f.Scope.Partition)) {
			fences = append(fences, f)
		}
	}
	for _, p := range req.Partitions {
		if !slices.ContainsFunc(fences, func(f sink.Fence) bool { return f.Scope.Partition == p }) {
			fences = append(fences, sink.Fence{Scope: epochs.Scope{Group: req.Group, Topic: req.Topic, Partition: p}})
		}
	}
	plans := make([]ResourcePlan, 0, len(fences))
	for _, f := range fences {
		st, err := store.State(ctx, f.Scope)
		if err != nil {
			return nil, fmt.Errorf("admin: reading the store's state of %s: %w", f.Scope, err)
		}
		var hs []fenceadmin.Entry
		if !f.Holder.IsZero() {
			if hs, err = s.History(ctx, f.Scope); err != nil {
				return nil, fmt.Errorf("admin: reading the sink's history of %s: %w", f.Scope, err)
			}
		}
		plans = append(plans, planResource(f, st, hs))
	}
	return plans, nil
}

// planResource holds the rules of a resource's reset: what a reset of
// the store's scope st does, for the sink's fence f with history hs, or
// why it is refused.
func planResource(f sink.Fence, st fencehttp.ScopeState, hs []fenceadmin.Entry) ResourcePlan {
	p := ResourcePlan{Scope: f.Scope, Store: st, Holder: f.Holder, HistoryFloor: -1}
	refuse := func(why ResourceRefusal, err error) ResourcePlan {
		p.Refused, p.Err = why, err
		p.Expect = ResourceExpect(st, p.Holder, p.Floor)
		return p
	}
	if f.Holder.IsZero() {
		return refuse(ResourceRefusedNoHolder, fmt.Errorf("%w: %s: nothing to pin the store to; wait for the worker's claim (status shows the partition) and plan again", ErrNoHolder, f.Scope))
	}
	if st.Admits(f.Holder) {
		return refuse(ResourceRefusedStoreAdmits, fmt.Errorf("%w: %s: the store (%s) admits the holder epoch %d member %s; nothing to reset",
			ErrStoreAdmits, f.Scope, st, f.Holder.Epoch, f.Holder.Member))
	}
	last := -1
	for i, h := range hs {
		if h.Kind == fenceadmin.KindReset {
			last = i
		}
	}
	if last < 0 {
		return refuse(ResourceRefusedNoSinkReset, fmt.Errorf("%w: %s: the store (%s) refuses the holder epoch %d member %s, and the sink shows no earlier incarnation of the group to keep out; "+
			"resolve the sink's fence first (fences reset, or the worker's takeover), or the store is right and the holder is stale", ErrNoSinkReset, f.Scope, st, f.Holder.Epoch, f.Holder.Member))
	}
	p.LastReset = hs[last]
	for _, h := range hs[:last+1] {
		if !h.Token.IsZero() {
			p.HistoryFloor = max(p.HistoryFloor, h.Token.Epoch)
		}
	}
	p.Floor = max(st.Token.Epoch, st.Floor, p.HistoryFloor, f.Holder.Epoch)
	p.After = st.AfterReset(fencehttp.ResetRequest{To: f.Holder, Floor: p.Floor})
	p.Expect = ResourceExpect(st, p.Holder, p.Floor)
	return p
}

// ResourceRequest is one guarded reset of a resource's store.
type ResourceRequest struct {
	Scope epochs.Scope
	// Expect is the plan's Expect (ResourceExpect): the reset proceeds
	// only if the store's state, the sink's holder and the floor are
	// still the ones planned.
	Expect string
	// Reason says why; required, recorded in the store's audit.
	Reason string
}

// ResourceResult is what a resource's reset did.
type ResourceResult struct {
	Plan          ResourcePlan
	Before, After fencehttp.ScopeState
}

// ResetResource resets a resource's store for req.Scope
// (docs/fenced-resources.md, "Resetting a store's scope"): it plans it
// (PlanResources), checks that the plan is the one the operator inspected
// (ErrMoved), is refused as the plan says (ErrNoHolder, ErrStoreAdmits,
// ErrNoSinkReset), and resets the scope in the store — a compare-and-set
// there too (a store that moved is ErrMoved, matching
// fencehttp.ErrResetConflict as well) — to the sink's holder, pinned
// below the plan's floor, with what it read in the store's audit entry. A
// worker whose partition the store blocked claims it again within its
// ReclaimInterval and resumes by itself. It may be called from any
// goroutine.
func ResetResource(ctx context.Context, store fencehttp.ScopeResetter, s ResourceSink, req ResourceRequest) (ResourceResult, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return ResourceResult{}, fmt.Errorf("%w: ResourceRequest.Reason is empty: a reset needs a reason (it is recorded)", ErrBadRequest)
	}
	plans, err := PlanResources(ctx, store, s, ResourcePlanRequest{Group: req.Scope.Group, Topic: req.Scope.Topic, Partitions: []int32{req.Scope.Partition}})
	if err != nil {
		return ResourceResult{}, err
	}
	pl := plans[0]
	res := ResourceResult{Plan: pl, Before: pl.Store}
	if req.Expect != pl.Expect {
		return res, fmt.Errorf("%w: %s: the store is now %s, the sink's holder %s, the floor %d (expect %s), not %s: inspect it again",
			ErrMoved, req.Scope, pl.Store, holder(pl.Holder), pl.Floor, pl.Expect, req.Expect)
	}
	if pl.Err != nil {
		return res, pl.Err
	}
	detail, _ := json.Marshal(map[string]any{
		"tool":   "admin.ResetResource",
		"store":  map[string]any{"epoch": pl.Store.Token.Epoch, "member": pl.Store.Token.Member, "floor": pl.Store.Floor},
		"holder": pl.Holder.String(),
		"floor":  pl.Floor,
		"sink_history": map[string]any{"max_epoch_to_last_reset": pl.HistoryFloor, "last_reset_seq": pl.LastReset.Seq,
			"last_reset_reason": pl.LastReset.Reason, "last_reset_cleared": pl.LastReset.Token.String()},
	})
	before, err := store.ResetScope(ctx, fencehttp.ResetRequest{Scope: req.Scope, Expect: pl.Store, To: pl.Holder, Floor: pl.Floor,
		Reason: req.Reason, Detail: string(detail)})
	if errors.Is(err, fencehttp.ErrResetConflict) {
		return res, fmt.Errorf("%w: %w; inspect it again", ErrMoved, err)
	}
	if err != nil {
		return res, fmt.Errorf("admin: resetting the store's scope %s: %w", req.Scope, err)
	}
	res.Before, res.After = before, pl.After
	return res, nil
}
