package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
	"github.com/workrouter/workrouter/sink/internal/spantext"
)

// deadRecord is a dead letter's record as stored (JSON; the topic ID is a
// field of its own).
type deadRecord struct {
	Offset    int64               `json:"offset"`
	Key       []byte              `json:"key,omitempty"`
	Value     []byte              `json:"value,omitempty"`
	Headers   []sink.RecordHeader `json:"headers,omitempty"`
	Timestamp time.Time           `json:"ts"`
	Reason    string              `json:"reason"`
	Error     string              `json:"error,omitempty"`
	Attempts  int                 `json:"attempts,omitempty"`
}

// DeadLetter stores rec as a dead letter of tok's scope and moves its
// checkpoint past it, following [sink.Sink.DeadLetter], in one Lua script
// with the holder check: a hash <Prefix>:dl:<id> and its ID in the sorted
// set <Prefix>:dls. A record that is done (below NextOffset, or in a done
// span) is a replay. A serial record's new NextOffset drops the spans it
// passes ([sink.Checkpoint.Raise]); a lane's (rec.Lane) adds [rec.From,
// rec.Offset+1) to the checkpoint. It may be called from any goroutine.
func (s *Sink) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec, s.Features()); err != nil {
		return sink.DeadLetterResult{}, err
	}
	from := int64(-1)
	if rec.Lane {
		from = rec.From
	}
	return s.deadLetter(ctx, tok, from, rec)
}

// deadLetter is DeadLetter: a serial record for from < 0, else a
// lane's covering [from, rec.Offset+1).
func (s *Sink) deadLetter(ctx context.Context, tok epochs.Token, from int64, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	op := fmt.Sprintf("dead letter %s@%d", tok, rec.Offset)
	if err := ctx.Err(); err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	body, err := json.Marshal(deadRecord{Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Headers: rec.Headers,
		Timestamp: rec.Timestamp, Reason: rec.Reason, Error: rec.Error, Attempts: rec.Attempts})
	if err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	sc := tok.Scope()
	cp, ok := s.cachedCheckpoint(tok)
	if !ok {
		if cp, err = s.readCheckpoint(ctx, op, tok, sink.OpDeadLetter); err != nil {
			return sink.DeadLetterResult{}, err
		}
	}
	for range maxAttempts {
		after := cp.Clone()
		store := !cp.Contains(rec.Offset)
		if store {
			if from >= 0 {
				after.Add(from, rec.Offset+1)
			} else {
				after.Raise(rec.Offset + 1)
			}
		}
		r, err := s.runScript(ctx, op, deadLetterScript, []string{s.fenceKey(sc), s.dlSeqKey(), s.dlIndexKey()},
			tok.Epoch, tok.Member, rec.Offset, s.dlRowPrefix(), body, rec.TopicID, rec.Reason, sc.Group, sc.Topic, sc.Partition,
			cp.NextOffset, spantext.Format(cp.Done), after.NextOffset, spantext.Format(after.Done), boolArg(store))
		s.held.written(sc)
		if err != nil {
			s.forget(tok)
			return sink.DeadLetterResult{}, err
		}
		switch str(r[0]) {
		case "fenced":
			s.forget(tok)
			return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: holder(sc, i64(r[1]) == 1, r[2], r[3]), Offered: tok}
		case "redo":
			cp = sink.Checkpoint{NextOffset: i64(r[1])}
			if cp.Done, err = spantext.Parse(str(r[2])); err != nil {
				return sink.DeadLetterResult{}, fmt.Errorf("redis: %s: %w", op, err)
			}
			continue
		case "replay":
			s.cacheCheckpoint(tok, cp, false)
			return sink.DeadLetterResult{NextOffset: cp.NextOffset}, nil
		case "ok":
		default:
			return sink.DeadLetterResult{}, fmt.Errorf("redis: %s: unexpected script reply %v", op, r)
		}
		s.cacheCheckpoint(tok, after, false)
		return sink.DeadLetterResult{ID: i64(r[1]), Stored: true, NextOffset: after.NextOffset}, nil
	}
	return sink.DeadLetterResult{}, fmt.Errorf("redis: %s: %w: the checkpoint kept changing (%d attempts)", op, ErrUnavailable, maxAttempts)
}

// DeadLetters returns the dead letters that match f, by ID, following
// [dlq.Store]: it reads every row (the index and one HGETALL
// each, pipelined) and filters them here. It may be called from any
// goroutine.
func (s *Sink) DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error) {
	ids, err := s.rdb.ZRange(ctx, s.dlIndexKey(), 0, -1).Result()
	if err != nil {
		return nil, s.wrap(ctx, "dead letters", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*goredis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, s.dlRowPrefix()+id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.wrap(ctx, "dead letters", err)
	}
	var out []dlq.Letter
	for i, c := range cmds {
		id, _ := strconv.ParseInt(ids[i], 10, 64)
		d, err := parseDeadLetter(id, c.Val())
		if err != nil {
			return nil, fmt.Errorf("redis: dead letter %d: %w", id, err)
		}
		if f.Match(d) {
			out = append(out, d)
			if f.Limit > 0 && len(out) == f.Limit {
				break
			}
		}
	}
	return out, nil
}

func parseDeadLetter(id int64, m map[string]string) (dlq.Letter, error) {
	var rec deadRecord
	if err := json.Unmarshal([]byte(m["rec"]), &rec); err != nil {
		return dlq.Letter{}, err
	}
	p, _ := strconv.ParseInt(m["p"], 10, 32)
	sc := epochs.Scope{Group: m["g"], Topic: m["tp"], Partition: int32(p)}
	ms, _ := strconv.ParseInt(m["at"], 10, 64)
	return dlq.Letter{
		ID: id, Scope: sc, Token: holder(sc, true, m["e"], m["m"]),
		Record: sink.DeadRecord{TopicID: m["tid"], Offset: rec.Offset, Key: rec.Key, Value: rec.Value, Headers: rec.Headers,
			Timestamp: rec.Timestamp, Reason: rec.Reason, Error: rec.Error, Attempts: rec.Attempts},
		At: time.UnixMilli(ms), State: dlq.State(m["st"]), Mirrored: m["mi"] == "1",
	}, nil
}

// ResolveDeadLetter moves dead letter id from state from to state to and
// appends an audit entry, in one Lua script, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error) {
	op := fmt.Sprintf("dead letter %d", id)
	if err := from.CheckResolve(to, strings.TrimSpace(reason)); err != nil {
		return dlq.Letter{}, fmt.Errorf("redis: %s: %w", op, err)
	}
	r, err := s.runScript(ctx, op, resolveScript, []string{s.dlKey(id), s.dlAuditKey(id), s.dlAuditSeqKey()},
		string(from), string(to), reason, detail)
	if err != nil {
		return dlq.Letter{}, err
	}
	m, err := s.rdb.HGetAll(ctx, s.dlKey(id)).Result()
	if err != nil && str(r[0]) != "notfound" {
		return dlq.Letter{}, s.wrap(ctx, op, err)
	}
	switch str(r[0]) {
	case "notfound":
		return dlq.Letter{}, fmt.Errorf("redis: %s: %w", op, sink.ErrNotFound)
	case "state":
		d, _ := parseDeadLetter(id, m)
		return d, fmt.Errorf("redis: %s is %s, not %s: %w", op, str(r[1]), from, dlq.ErrState)
	}
	return parseDeadLetter(id, m)
}

// auditRow is a dead letter's audit entry as stored.
type auditRow struct {
	Seq    string `json:"s"`
	From   string `json:"f"`
	To     string `json:"t"`
	Reason string `json:"r"`
	Detail string `json:"d"`
	At     string `json:"at"`
}

// DeadLetterAudit returns dead letter id's audit entries in order,
// following [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetterAudit(ctx context.Context, id int64) ([]dlq.Action, error) {
	rows, err := s.rdb.LRange(ctx, s.dlAuditKey(id), 0, -1).Result()
	if err != nil {
		return nil, s.wrap(ctx, fmt.Sprintf("dead letter %d audit", id), err)
	}
	var out []dlq.Action
	for _, raw := range rows {
		var a auditRow
		if err := json.Unmarshal([]byte(raw), &a); err != nil {
			return nil, fmt.Errorf("redis: dead letter %d audit: %w", id, err)
		}
		seq, _ := strconv.ParseInt(a.Seq, 10, 64)
		ms, _ := strconv.ParseInt(a.At, 10, 64)
		out = append(out, dlq.Action{Seq: seq, ID: id, From: dlq.State(a.From), To: dlq.State(a.To),
			Reason: a.Reason, Detail: a.Detail, At: time.UnixMilli(ms)})
	}
	return out, nil
}

// MarkMirrored records that dead letters ids were published to the DLQ
// topic, following [dlq.Store]; unknown IDs are ignored. It may
// be called from any goroutine.
func (s *Sink) MarkMirrored(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.dlKey(id)
	}
	if _, err := s.runScript(ctx, "mark mirrored", markMirroredScript, keys); err != nil {
		return err
	}
	return nil
}
