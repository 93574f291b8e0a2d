package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/fenceadmin"
	"github.com/workrouter/workrouter/sink/internal/cmdids"
	"github.com/workrouter/workrouter/sink/internal/spantext"
)

// maxAttempts bounds how many times Apply runs a batch's effects again
// because its view (NextOffset, duplicates, values read) moved before the
// script ran. A tenure is its scope's only writer, so more than a couple
// means other writers keep changing the keys its handlers read.
const maxAttempts = 100

// Features returns the sink's features: command IDs within
// [Config.DedupeWindow], gaps and dead letters ([sink.Features]). It may
// be called from any goroutine.
func (s *Sink) Features() sink.Features {
	return sink.Features{DedupeWindow: s.cfg.DedupeWindow, Gaps: true, DeadLetters: true}
}

// Claim makes tok the holder of its scope and returns the scope's
// checkpoint (the fence hash's "sp" field holds its done spans,
// "from-to,…"), following [sink.Sink.Claim], in one Lua script: the
// ordering rule of [epochs.Token.CanClaim] (else a *[sink.FencedError])
// or a proven takeover, the proof after a reset of
// [sink.Fence.CheckClaim] (else a *[sink.ProofRequiredError]), the log
// continuity rules of [sink.CheckLog] with [sink.Checkpoint.End] against
// obs.LogEnd (else a *[sink.LogChangedError]), each changing nothing;
// otherwise it stores tok, adopts obs.TopicID, and appends a claim entry
// to the scope's history. It may be called from any goroutine.
func (s *Sink) Claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	return s.claim(ctx, tok, obs)
}

func (s *Sink) claim(ctx context.Context, tok epochs.Token, obs sink.Observed) (sink.Checkpoint, error) {
	if err := tok.Validate(); err != nil {
		return sink.Checkpoint{}, err
	}
	op := "claim " + tok.String()
	if err := ctx.Err(); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	sc := tok.Scope()
	defer s.held.written(sc)
	groupEpoch, detail := int32(0), ""
	if obs.Proof != nil && obs.Proof.GroupEpoch > 0 {
		groupEpoch, detail = obs.Proof.GroupEpoch, obs.TakeoverDetail(tok)
	}
	r, err := s.runScript(ctx, op, claimScript, []string{s.fenceKey(sc), s.scopesKey(), s.histKey(sc), s.histSeqKey()},
		tok.Epoch, tok.Member, proofArg(obs.Proof), obs.TopicID, obs.LogStart, obs.LogEnd,
		sc.Group, sc.Topic, sc.Partition, scopeID(sc), s.cfg.HistoryCap, groupEpoch, fenceadmin.TakeoverReason, detail)
	if err != nil {
		return sink.Checkpoint{}, err
	}
	switch str(r[0]) {
	case "fenced":
		return sink.Checkpoint{}, &sink.FencedError{Op: sink.OpClaim, Stored: holder(sc, true, r[1], r[2]), Offered: tok, Version: i64(r[3])}
	case "proof":
		e := &sink.ProofRequiredError{Offered: tok, Version: i64(r[1])}
		if obs.Proof != nil {
			e.Stale, e.ProvenAt = true, obs.Proof.Version
		}
		return sink.Checkpoint{}, fmt.Errorf("redis: %s: %w", op, e)
	case "log":
		c := map[string]error{"recreated": sink.ErrTopicRecreated, "truncated": sink.ErrLogTruncated, "retention": sink.ErrRetentionLoss}[str(r[1])]
		return sink.Checkpoint{}, &sink.LogChangedError{Scope: sc, Case: c, StoredTopicID: str(r[2]), NextOffset: i64(r[3]), Observed: obs}
	case "ok":
	default:
		return sink.Checkpoint{}, fmt.Errorf("redis: %s: unexpected script reply %v", op, r)
	}
	cp := sink.Checkpoint{NextOffset: i64(r[1])}
	if cp.Done, err = spantext.Parse(str(r[2])); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	s.cacheCheckpoint(tok, cp, true)
	return cp, nil
}

// proofArg is a claim's proof as the claim script takes it: its version,
// or "" for none.
func proofArg(p *sink.Proof) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(p.Version, 10)
}

// holder builds the stored token of a script's fenced reply.
func holder(sc epochs.Scope, has bool, epoch, member any) epochs.Token {
	m := str(member)
	if !has || m == "" {
		return epochs.Token{}
	}
	return epochs.Token{Group: sc.Group, Topic: sc.Topic, Partition: sc.Partition, Epoch: int32(i64(epoch)), Member: m}
}

// Apply applies batch b of tok's scope, following [sink.Sink.Apply]. The
// effects run first, in Go, for the records the tenure's view of the
// checkpoint does not contain (and, with b.IDs, that are not duplicates),
// against a *[Tx] that buffers their writes; then one Lua script checks that tok is exactly the holder
// (else a *[sink.FencedError], nothing written), that NextOffset and every
// value the effects read are unchanged (else the effects run again on a
// fresh Tx), validates every buffered command, and only then runs them and
// sets NextOffset to the last offset + 1. An effect error is returned in a
// *[sink.EffectError] and nothing is sent; a buffered command the server
// would refuse fails the batch the same way, matching [ErrCommand]; a
// cancelled ctx before the script fails with nothing applied. It may be
// called from any goroutine; effect is called on the calling goroutine.
//
// With b.IDs the duplicates are decided first, from the Sink's cache of
// the scope's applied IDs (loaded, with the fence's IDs version, in one
// MULTI when it does not hold the scope); the script refuses the
// decisions, and the sink reloads the IDs and runs the effects again, if
// the fence's IDs version moved since the cache was loaded (another Sink
// applied in the scope). In the same script it adds the batch's applied
// IDs as one row, removes the rows below the horizon when due
// (ZREMRANGEBYSCORE on the rows' last offsets: no scan) and moves the IDs
// version.
//
// A lane's batch (b.From) adds [b.From[i], b.Offsets[i]+1) for every
// record not skipped to the checkpoint. Lanes of one holder that commit
// in between make a lane's view stale: the script refuses it and the sink
// runs the batch again on the stored checkpoint, so lanes run
// concurrently but commit one at a time; the result's NextOffset is the
// exact watermark the script left.
func (s *Sink) Apply(ctx context.Context, tok epochs.Token, b sink.Batch, effect sink.Effect[*Tx]) (sink.Result, error) {
	if err := sink.CheckBatch(tok, b, effect, s.Features()); err != nil {
		return sink.Result{}, err
	}
	return s.apply(ctx, tok, b.Offsets, b.From, b.IDs, effect)
}

// apply is Apply of the batch (offsets, from, ids), a lane's when from is
// not nil. It works on the tenure's view of the checkpoint (the
// watermark and the done spans, cached from its last claim or apply):
// records the checkpoint contains are skipped, and the script refuses the
// batch (the sink then runs it again on the stored checkpoint) when the
// stored one is not the view.
func (s *Sink) apply(ctx context.Context, tok epochs.Token, offsets, from []int64, ids []string, effect sink.Effect[*Tx]) (sink.Result, error) {
	op := "apply " + tok.String()
	sc := tok.Scope()
	cp, ok := s.cachedCheckpoint(tok)
	if !ok {
		// No claim or apply of this tenure through this Sink: read the
		// fence first, so that a token that is not the holder runs no
		// effect (a refusal may be decided at any moment; an acceptance
		// only by the script).
		var err error
		if cp, err = s.readCheckpoint(ctx, op, tok, sink.OpApply); err != nil {
			return sink.Result{}, err
		}
	}
	for range maxAttempts {
		if err := ctx.Err(); err != nil {
			return sink.Result{}, fmt.Errorf("redis: %s: %w", op, err)
		}
		before := cp.Clone()
		after := cp.Clone()
		first, _ := slices.BinarySearch(offsets, before.NextOffset)
		skip := make([]bool, len(offsets)) // done already: skipped, never run
		for i := range offsets {
			skip[i] = i < first || before.Contains(offsets[i])
		}
		dup := make([]bool, len(offsets))
		var version int64
		if ids != nil {
			var err error
			if version, err = s.duplicates(ctx, sc, offsets, ids, first, dup); err != nil {
				return sink.Result{}, s.wrap(ctx, op+": load command IDs", err)
			}
		}
		tx := newTx(s)
		tx.cmds = make([]command, 0, len(offsets)-first) // one command a record, commonly
		var res sink.Result
		changed := false
		for i := range offsets {
			if skip[i] {
				res.Skipped++
				continue
			}
			changed = true
			if from != nil {
				after.Add(from[i], offsets[i]+1)
			}
			if dup[i] {
				res.Duplicates = append(res.Duplicates, i)
				continue
			}
			if err := ctx.Err(); err != nil {
				tx.done = true
				return sink.Result{}, fmt.Errorf("redis: %s: %w", op, err)
			}
			tx.rec = i
			if err := effect(ctx, tx, i); err != nil {
				tx.done = true
				return sink.Result{}, &sink.EffectError{Index: i, Offset: offsets[i], Err: err, TxHealthy: !tx.failed}
			}
			res.Applied++
		}
		tx.done = true
		if err := ctx.Err(); err != nil {
			return sink.Result{}, fmt.Errorf("redis: %s: %w", op, err)
		}
		if from == nil && first < len(offsets) {
			after.Raise(offsets[len(offsets)-1] + 1)
			changed = true
		}
		newNext, newSpans, horizon, expectIV, rowMember, rowLast := "", "", "", "", "", ""
		var row cmdids.Row
		prune := false
		if changed {
			newNext, newSpans = strconv.FormatInt(after.NextOffset, 10), spantext.Format(after.Done)
			if ids != nil {
				expectIV = strconv.FormatInt(version, 10)
				if prune = cmdids.PruneDue(before.NextOffset, after.NextOffset, s.cfg.DedupeWindow); prune {
					horizon = strconv.FormatInt(cmdids.Horizon(after.NextOffset, s.cfg.DedupeWindow), 10)
				}
				notRun := make([]bool, len(offsets))
				for i := range notRun {
					notRun[i] = skip[i] || dup[i]
				}
				row = appliedRow(offsets, ids, 0, notRun)
				if len(row.IDs) > 0 {
					rowMember = idRowMember(version, row)
					rowLast = strconv.FormatInt(row.Last, 10)
				}
			}
		}
		u := &unit{epoch: tok.Epoch, member: tok.Member, expectNext: before.NextOffset, expectSpans: spantext.Format(before.Done),
			newNext: newNext, newSpans: newSpans, expectIV: expectIV, horizon: horizon, dups: len(res.Duplicates),
			rowMember: rowMember, rowLast: rowLast, cmds: tx.cmds, reads: tx.reads}
		var r []any
		var err error
		var groupFirst []int
		if u.watchable() {
			// A plain or once apply (not a lane: lanes of a scope apply
			// concurrently and would keep moving each other's watch) on
			// the scope's held watch when it has one free; WAIT needs the
			// writing connection's reply first: the watched path.
			var w *heldWatch
			if from == nil && s.cfg.WaitReplicas == 0 {
				w = s.held.take(s.rdb, sc)
			}
			if w != nil {
				r, err = s.applyHeld(ctx, sc, u, w)
				s.held.put(sc, w, err == nil)
				if err != nil {
					err = s.wrap(ctx, op, err)
				}
			} else {
				r, err = s.applyWatched(ctx, op, sc, u)
				s.held.written(sc)
			}
		} else {
			var args []any
			args, groupFirst = u.scriptArgs()
			r, err = s.runScript(ctx, op, applyScript, []string{s.fenceKey(sc), s.idsKey(sc)}, args...)
			s.held.written(sc)
		}
		if err != nil {
			if ids != nil {
				s.ids.Drop(sc) // the script may have run
			}
			s.forget(tok)
			return sink.Result{}, err
		}
		switch str(r[0]) {
		case "fenced":
			s.forget(tok)
			return sink.Result{}, &sink.FencedError{Op: sink.OpApply, Stored: holder(sc, i64(r[1]) == 1, r[2], r[3]), Offered: tok}
		case "redo":
			if str(r[2]) != "" {
				s.ids.Drop(sc) // another writer moved the IDs: reload
			}
			cp = sink.Checkpoint{NextOffset: i64(r[1])}
			if cp.Done, err = spantext.Parse(str(r[3])); err != nil {
				return sink.Result{}, fmt.Errorf("redis: %s: %w", op, err)
			}
			continue
		case "reads":
			continue
		case "moved":
			// The watched fence changed between its read and EXEC, which
			// then wrote nothing: read it again (a new holder fences tok).
			if ids != nil {
				s.ids.Drop(sc)
			}
			if cp, err = s.readCheckpoint(ctx, op, tok, sink.OpApply); err != nil {
				s.forget(tok)
				return sink.Result{}, err
			}
			continue
		case "invalid":
			c := tx.cmds[groupFirst[i64(r[1])-1]]
			return sink.Result{}, &sink.EffectError{Index: c.rec, Offset: offsets[c.rec],
				Err: fmt.Errorf("%w: %s (key %s)", ErrCommand, str(r[2]), c.key), TxHealthy: true} // the server refused the handler's command
		case "ok":
		default:
			return sink.Result{}, fmt.Errorf("redis: %s: unexpected script reply %v", op, r)
		}
		if ids != nil && changed {
			s.ids.Committed(sc, version, row, prune, cmdids.Horizon(after.NextOffset, s.cfg.DedupeWindow))
		}
		if !changed {
			after = before
		}
		res.NextOffset = after.NextOffset
		s.cacheCheckpoint(tok, after, false)
		return res, nil
	}
	return sink.Result{}, fmt.Errorf("redis: %s: %w: the checkpoint or the keys the handlers read kept changing (%d attempts)", op, ErrUnavailable, maxAttempts)
}

// readCheckpoint reads tok's scope's fence: a *sink.FencedError (of
// fop) unless tok is the holder, else the checkpoint.
func (s *Sink) readCheckpoint(ctx context.Context, op string, tok epochs.Token, fop sink.Op) (sink.Checkpoint, error) {
	sc := tok.Scope()
	f, err := s.rdb.HMGet(ctx, s.fenceKey(sc), "e", "m", "n", "sp").Result()
	if err != nil {
		return sink.Checkpoint{}, s.wrap(ctx, op, err)
	}
	stored := holder(sc, true, f[0], f[1])
	if !tok.Holds(stored) {
		return sink.Checkpoint{}, &sink.FencedError{Op: fop, Stored: stored, Offered: tok}
	}
	cp := sink.Checkpoint{NextOffset: i64(f[2])}
	if cp.Done, err = spantext.Parse(str(f[3])); err != nil {
		return sink.Checkpoint{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	return cp, nil
}

// forget drops the cached NextOffset of tok's scope if it is tok's, and
// closes the scope's held watch (tok was fenced, or its call failed: this
// process may no longer apply there).
func (s *Sink) forget(tok epochs.Token) {
	s.mu.Lock()
	if c, ok := s.next[tok.Scope()]; ok && c.tok == tok {
		delete(s.next, tok.Scope())
	}
	s.mu.Unlock()
	s.held.drop(tok.Scope())
}

// Fences returns the stored state of every scope the sink knows
// (the members of <Prefix>:scopes), implementing [fenceadmin.Lister]. It may be
// called from any goroutine.
func (s *Sink) Fences(ctx context.Context) ([]sink.Fence, error) {
	ids, err := s.rdb.SMembers(ctx, s.scopesKey()).Result()
	if err != nil {
		return nil, s.wrap(ctx, "fences", err)
	}
	slices.Sort(ids)
	pipe := s.rdb.Pipeline()
	for _, id := range ids {
		pipe.HGetAll(ctx, s.cfg.Prefix+":fence:"+id)
	}
	cmds, err := pipe.Exec(ctx)
	if err != nil && len(ids) > 0 {
		return nil, s.wrap(ctx, "fences", err)
	}
	out := make([]sink.Fence, 0, len(ids))
	for i, c := range cmds {
		m, err := c.(interface {
			Result() (map[string]string, error)
		}).Result()
		if err != nil {
			return nil, s.wrap(ctx, "fences", err)
		}
		if len(m) == 0 {
			continue
		}
		f, err := parseFence(m)
		if err != nil {
			return nil, fmt.Errorf("redis: fences: scope %s: %w", ids[i], err)
		}
		out = append(out, f)
	}
	return out, nil
}

// parseFence reads a fence hash.
func parseFence(m map[string]string) (sink.Fence, error) {
	p, _ := strconv.ParseInt(m["p"], 10, 32)
	sc := epochs.Scope{Group: m["g"], Topic: m["tp"], Partition: int32(p)}
	// A fence written with a proof floor ('pb', before the proof
	// requirement became permanent) asks a proof as one reset since.
	pb, _ := strconv.ParseInt(m["pb"], 10, 64)
	f := sink.Fence{Scope: sc, TopicID: m["t"], ProofRequired: m["pr"] == "1" || pb > 0}
	f.Holder = holder(sc, true, m["e"], m["m"])
	f.NextOffset, _ = strconv.ParseInt(m["n"], 10, 64)
	f.Version, _ = strconv.ParseInt(m["v"], 10, 64)
	f.Duplicates, _ = strconv.ParseInt(m["d"], 10, 64)
	var err error
	f.Done, err = spantext.Parse(m["sp"])
	return f, err
}

// historyRow is a history entry as the scripts store it (JSON, every
// number a string).
type historyRow struct {
	Seq    string `json:"s"`
	Kind   string `json:"k"`
	Epoch  string `json:"e"`
	Member string `json:"m"`
	Next   string `json:"n"`
	Reason string `json:"r"`
	Topic  string `json:"t"`
	Detail string `json:"d"`
	At     string `json:"at"`
	// Spans are a claim's done spans (the ones it returned) or a reset's
	// (the ones it kept), as the fence hash stores them.
	Spans string `json:"sp"`
	// Proven is "1" for a claim that came with a current proof.
	Proven string `json:"pv"`
}

// History returns the claims and resets of scope in order, implementing
// [fenceadmin.Historian]: the list <Prefix>:hist:<scope>, capped at
// [Config.HistoryCap] entries (the oldest trimmed first). At is the
// server's clock (TIME) at the entry, to the millisecond. It may be
// called from any goroutine.
func (s *Sink) History(ctx context.Context, scope epochs.Scope) ([]fenceadmin.Entry, error) {
	rows, err := s.rdb.LRange(ctx, s.histKey(scope), 0, -1).Result()
	if err != nil {
		return nil, s.wrap(ctx, "history "+scope.String(), err)
	}
	out := make([]fenceadmin.Entry, 0, len(rows))
	for _, raw := range rows {
		var h historyRow
		if err := json.Unmarshal([]byte(raw), &h); err != nil {
			return nil, fmt.Errorf("redis: history %s: %w", scope, err)
		}
		e := fenceadmin.Entry{Kind: h.Kind, Reason: h.Reason, TopicID: h.Topic, Detail: h.Detail, Proven: h.Proven == "1"}
		if e.Done, err = spantext.Parse(h.Spans); err != nil {
			return nil, fmt.Errorf("redis: history %s: %w", scope, err)
		}
		e.Seq, _ = strconv.ParseInt(h.Seq, 10, 64)
		e.NextOffset, _ = strconv.ParseInt(h.Next, 10, 64)
		e.Token = holder(scope, true, h.Epoch, h.Member)
		ms, _ := strconv.ParseInt(h.At, 10, 64)
		e.At = time.UnixMilli(ms)
		out = append(out, e)
	}
	return out, nil
}

// ResetFence is the admin reset of a scope's fence, following
// [fenceadmin.Resetter], in one Lua script: a compare-and-set on the holder,
// NextOffset and topic ID of req.Expect (else [fenceadmin.ErrConflict]),
// then the fence [fenceadmin.AfterReset] returns and a reset entry in the
// history. It may be called from any goroutine.
func (s *Sink) ResetFence(ctx context.Context, req fenceadmin.ResetRequest) (sink.Fence, error) {
	sc := req.Scope
	op := "reset " + sc.String()
	if strings.TrimSpace(req.Reason) == "" {
		return sink.Fence{}, fmt.Errorf("redis: %s: %w", op, sink.ErrNoReason)
	}
	if err := sc.Validate(); err != nil {
		return sink.Fence{}, err
	}
	newNext := ""
	if req.NextOffset != nil {
		newNext = strconv.FormatInt(*req.NextOffset, 10)
	}
	e := req.Expect
	defer s.held.written(sc)
	r, err := s.runScript(ctx, op, resetScript, []string{s.fenceKey(sc), s.histKey(sc), s.histSeqKey()},
		e.Holder.Member, e.Holder.Epoch, e.NextOffset, e.TopicID, newNext, req.TopicID, req.Reason, req.Detail, s.cfg.HistoryCap)
	if err != nil {
		return sink.Fence{}, err
	}
	if str(r[0]) == "notfound" {
		return sink.Fence{}, fmt.Errorf("redis: %s: %w", op, sink.ErrNotFound)
	}
	before := sink.Fence{Scope: sc, Holder: holder(sc, true, r[1], r[2]), NextOffset: i64(r[3]), TopicID: str(r[4]),
		ProofRequired: str(r[5]) == "1", Version: i64(r[6]), Duplicates: i64(r[7])}
	if before.Done, err = spantext.Parse(str(r[8])); err != nil {
		return sink.Fence{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	if str(r[0]) == "conflict" {
		return sink.Fence{}, fmt.Errorf("redis: %s: %w: expected holder %s at %d on %q, found %s at %d on %q", op, fenceadmin.ErrConflict,
			e.Holder, e.NextOffset, e.TopicID, before.Holder, before.NextOffset, before.TopicID)
	}
	s.forgetScope(sc)
	s.log.Info("redis sink: fence reset", "scope", sc.String(), "reason", req.Reason, "cleared", before.Holder.String(), "next_offset", before.NextOffset)
	return before, nil
}

// appliedRow returns the row of the IDs of the records from index first on
// that are not duplicates and carry an ID.
func appliedRow(offsets []int64, ids []string, first int, dup []bool) cmdids.Row {
	r := cmdids.Row{Offs: make([]int64, 0, len(offsets)-first), IDs: make([]string, 0, len(offsets)-first)}
	for i := first; i < len(offsets); i++ {
		if !dup[i] && ids[i] != "" {
			r.Offs = append(r.Offs, offsets[i])
			r.IDs = append(r.IDs, ids[i])
			r.Last = offsets[i]
		}
	}
	return r
}

// idRowMember is the member of a row of command IDs in the scope's sorted
// set (scored by its last offset): "<first>|<last>|<version>|" and the
// IDs encoded by cmdids.Encode. The version the row was written at makes
// it unique.
func idRowMember(version int64, r cmdids.Row) string {
	return strconv.FormatInt(r.Offs[0], 10) + "|" + strconv.FormatInt(r.Last, 10) + "|" + strconv.FormatInt(version, 10) + "|" +
		string(cmdids.Encode(r.Offs[0], r.Offs, r.IDs))
}

// parseIDRow reads a member idRowMember wrote.
func parseIDRow(m string) (cmdids.Row, error) {
	parts := strings.SplitN(m, "|", 4)
	if len(parts) != 4 {
		return cmdids.Row{}, fmt.Errorf("%w: a command ID row without its header", cmdids.ErrCorrupt)
	}
	first, err1 := strconv.ParseInt(parts[0], 10, 64)
	last, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return cmdids.Row{}, fmt.Errorf("%w: a command ID row's header %q", cmdids.ErrCorrupt, parts[0]+"|"+parts[1])
	}
	offs, ids, err := cmdids.Decode(first, []byte(parts[3]))
	if err != nil {
		return cmdids.Row{}, err
	}
	return cmdids.Row{Last: last, Offs: offs, IDs: ids}, nil
}

// duplicates marks in dup the records of the batch, from index first on,
// that are duplicates: an ID seen earlier in the batch, or one the scope
// applied within the window, looked up in the per-Sink cache of the
// scope's rows (loaded, with the IDs version, in one MULTI when the cache
// does not hold the scope). It returns the version the decisions were
// made on; the apply script refuses them (and the sink reloads) if the
// stored version moved.
func (s *Sink) duplicates(ctx context.Context, sc epochs.Scope, offsets []int64, ids []string, first int, dup []bool) (int64, error) {
	plan := cmdids.PlanBatch(ids, first)
	for _, i := range plan.InBatch {
		dup[i] = true
	}
	found := func(i int, applied int64) { dup[i] = cmdids.IsDuplicate(offsets[i], applied, s.cfg.DedupeWindow) }
	if v, ok := s.ids.Version(sc); ok && s.ids.Lookup(sc, v, ids, plan.Lookup, found) {
		return v, nil
	}
	var ivCmd *goredis.StringCmd
	var rowsCmd *goredis.StringSliceCmd
	if _, err := s.rdb.TxPipelined(ctx, func(p goredis.Pipeliner) error {
		ivCmd = p.HGet(ctx, s.fenceKey(sc), "iv")
		rowsCmd = p.ZRange(ctx, s.idsKey(sc), 0, -1)
		return nil
	}); err != nil && !errors.Is(err, goredis.Nil) {
		return 0, err
	}
	v, _ := strconv.ParseInt(ivCmd.Val(), 10, 64)
	rows := make([]cmdids.Row, 0, len(rowsCmd.Val()))
	for _, m := range rowsCmd.Val() {
		r, err := parseIDRow(m)
		if err != nil {
			return 0, err
		}
		rows = append(rows, r)
	}
	s.ids.Load(sc, v, rows)
	s.ids.Lookup(sc, v, ids, plan.Lookup, found)
	return v, nil
}
