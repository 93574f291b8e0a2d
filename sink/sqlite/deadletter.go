package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// header is a record header as stored in the dead letters' headers column
// (JSON; the value base64 as encoding/json writes []byte).
type header struct {
	K string `json:"k"`
	V []byte `json:"v"`
}

func encodeHeaders(hs []sink.RecordHeader) (string, error) {
	out := make([]header, len(hs))
	for i, h := range hs {
		out[i] = header{h.Key, h.Value}
	}
	b, err := json.Marshal(out)
	return string(b), err
}

func decodeHeaders(s string) ([]sink.RecordHeader, error) {
	var in []header
	if err := json.Unmarshal([]byte(s), &in); err != nil {
		return nil, err
	}
	var out []sink.RecordHeader
	for _, h := range in {
		out = append(out, sink.RecordHeader{Key: h.K, Value: h.V})
	}
	return out, nil
}

// DeadLetter stores rec as a dead letter of tok's scope and moves its
// checkpoint past it, following [sink.Sink.DeadLetter], in one writing
// transaction: it reads the fence row and fails with a
// *[sink.FencedError] unless tok is exactly the holder, stores nothing for
// a replay (rec.Offset below NextOffset, or in a done span), and
// otherwise (after a gap too) inserts the row (unique per scope, log and
// offset) and, with the same conditional update as Apply, moves
// NextOffset to rec.Offset+1 (dropping the done spans below it:
// [sink.Checkpoint.Raise]) or, for a lane's record (rec.Lane), adds
// [rec.From, rec.Offset+1) to the checkpoint with the done spans' rows.
// It may be called from any goroutine.
func (s *Sink) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	if err := sink.CheckDeadLetter(tok, rec, s.Features()); err != nil {
		return sink.DeadLetterResult{}, err
	}
	return s.deadLetter(ctx, tok, rec.From, rec.Lane, rec)
}

// deadLetter is DeadLetter: a lane's (covering [from, rec.Offset+1))
// when gapped.
func (s *Sink) deadLetter(ctx context.Context, tok epochs.Token, from int64, gapped bool, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	op := fmt.Sprintf("dead letter %s@%d", tok, rec.Offset)
	headers, err := encodeHeaders(rec.Headers)
	if err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("sqlite: %s: headers: %w", op, err)
	}
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return sink.DeadLetterResult{}, err
	}
	defer done()
	scope := tok.Scope()
	row, err := s.readFence(ctx, tx, scope)
	if err != nil {
		return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
	}
	if !tok.Holds(row.holder) {
		return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: row.holder, Offered: tok}
	}
	cp, err := s.checkpointOf(ctx, tx, scope, row)
	if err != nil {
		return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
	}
	if cp.Contains(rec.Offset) {
		return sink.DeadLetterResult{NextOffset: row.nextOffset}, nil
	}
	topicID := rec.TopicID
	if topicID == "" {
		topicID = row.topicID
	}
	res, err := tx.StmtContext(ctx, s.insDeadLetter).ExecContext(ctx, scope.Group, scope.Topic, scope.Partition, topicID, rec.Offset,
		rec.Key, rec.Value, headers, rec.Timestamp.UTC().Format(time.RFC3339Nano), rec.Reason, rec.Error, rec.Attempts,
		tok.Epoch, tok.Member, now())
	if err != nil {
		return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
	}
	if !gapped && row.spans == 0 {
		next := rec.Offset + 1
		upd, err := tx.StmtContext(ctx, s.updNext).ExecContext(ctx,
			next, scope.Group, scope.Topic, scope.Partition, row.epoch, row.member, row.nextOffset)
		if err != nil {
			return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
		}
		if n, err := upd.RowsAffected(); err != nil || n != 1 {
			return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: row.holder, Offered: tok}
		}
		if err := s.commit(ctx, tx, op); err != nil {
			return sink.DeadLetterResult{}, err
		}
		return sink.DeadLetterResult{ID: id, Stored: true, NextOffset: next}, nil
	}
	before := cp.Clone()
	if gapped {
		cp.Add(from, rec.Offset+1)
	} else {
		cp.Raise(rec.Offset + 1)
	}
	if err := s.storeCheckpoint(ctx, tx, scope, row, before, cp, false, 0); err != nil {
		if errors.Is(err, sink.ErrFenced) {
			return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: row.holder, Offered: tok}
		}
		return sink.DeadLetterResult{}, s.wrap(ctx, op, err)
	}
	if err := s.commit(ctx, tx, op); err != nil {
		return sink.DeadLetterResult{}, err
	}
	return sink.DeadLetterResult{ID: id, Stored: true, NextOffset: cp.NextOffset}, nil
}

const deadLetterCols = "id, grp, topic, part, topic_id, off, rec_key, rec_value, headers, rec_time, reason, error, attempts, epoch, member, at, state, mirrored"

func scanDeadLetter(rows interface{ Scan(...any) error }) (dlq.Letter, error) {
	var (
		d                        dlq.Letter
		headers, recTime, at, st string
		epoch                    int32
		member                   string
		key, value               []byte
	)
	if err := rows.Scan(&d.ID, &d.Scope.Group, &d.Scope.Topic, &d.Scope.Partition, &d.Record.TopicID, &d.Record.Offset,
		&key, &value, &headers, &recTime, &d.Record.Reason, &d.Record.Error, &d.Record.Attempts, &epoch, &member, &at, &st, &d.Mirrored); err != nil {
		return d, err
	}
	d.Record.Key, d.Record.Value = key, value
	var err error
	if d.Record.Headers, err = decodeHeaders(headers); err != nil {
		return d, err
	}
	if d.Record.Timestamp, err = time.Parse(time.RFC3339Nano, recTime); err != nil {
		return d, err
	}
	if d.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return d, err
	}
	d.State = dlq.State(st)
	d.Token = epochs.Token{Group: d.Scope.Group, Topic: d.Scope.Topic, Partition: d.Scope.Partition, Epoch: epoch, Member: member}
	return d, nil
}

// DeadLetters returns the dead letters that match f, by ID, following
// [dlq.Store]. It reads without the write lock and may be
// called from any goroutine.
func (s *Sink) DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error) {
	var where []string
	var args []any
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if f.Group != "" {
		add("grp = ?", f.Group)
	}
	if f.Topic != "" {
		add("topic = ?", f.Topic)
	}
	if f.Partition != nil {
		add("part = ?", *f.Partition)
	}
	if f.Reason != "" {
		add("reason = ?", f.Reason)
	}
	if !f.Since.IsZero() {
		add("at >= ?", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if f.NotMirrored {
		add("mirrored = 0")
	}
	if len(f.States) > 0 {
		add("state IN ("+strings.Repeat("?, ", len(f.States)-1)+"?)", anys(f.States)...)
	}
	if len(f.IDs) > 0 {
		add("id IN ("+strings.Repeat("?, ", len(f.IDs)-1)+"?)", anys(f.IDs)...)
	}
	q := "SELECT " + deadLetterCols + " FROM " + s.deadLetters
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, s.wrap(ctx, "dead letters", err)
	}
	defer rows.Close()
	var out []dlq.Letter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, s.wrap(ctx, "dead letters", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "dead letters", err)
	}
	return out, nil
}

func anys[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// ResolveDeadLetter moves dead letter id from state from to to, as a
// compare-and-set, and appends an audit row, in one transaction, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error) {
	op := fmt.Sprintf("dead letter %d %s→%s", id, from, to)
	if err := from.CheckResolve(to, strings.TrimSpace(reason)); err != nil {
		return dlq.Letter{}, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return dlq.Letter{}, err
	}
	defer done()
	d, err := scanDeadLetter(tx.QueryRowContext(ctx, "SELECT "+deadLetterCols+" FROM "+s.deadLetters+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return dlq.Letter{}, fmt.Errorf("sqlite: %s: %w", op, sink.ErrNotFound)
	}
	if err != nil {
		return dlq.Letter{}, s.wrap(ctx, op, err)
	}
	if d.State != from {
		return d, fmt.Errorf("sqlite: %s: it is %s: %w", op, d.State, dlq.ErrState)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.deadLetters+" SET state = ? WHERE id = ? AND state = ?", string(to), id, string(from)); err != nil {
		return dlq.Letter{}, s.wrap(ctx, op, err)
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+s.dlAudit+" (id, from_state, to_state, reason, detail, at) VALUES (?, ?, ?, ?, ?, ?)",
		id, string(from), string(to), reason, detail, now()); err != nil {
		return dlq.Letter{}, s.wrap(ctx, op, err)
	}
	if err := s.commit(ctx, tx, op); err != nil {
		return dlq.Letter{}, err
	}
	d.State = to
	return d, nil
}

// DeadLetterAudit returns the audit rows of dead letter id, in order,
// following [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetterAudit(ctx context.Context, id int64) ([]dlq.Action, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT seq, id, from_state, to_state, reason, detail, at FROM "+s.dlAudit+" WHERE id = ? ORDER BY seq", id)
	if err != nil {
		return nil, s.wrap(ctx, "dead letter audit", err)
	}
	defer rows.Close()
	var out []dlq.Action
	for rows.Next() {
		var a dlq.Action
		var from, to, at string
		if err := rows.Scan(&a.Seq, &a.ID, &from, &to, &a.Reason, &a.Detail, &at); err != nil {
			return nil, s.wrap(ctx, "dead letter audit", err)
		}
		a.From, a.To = dlq.State(from), dlq.State(to)
		if a.At, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return nil, s.wrap(ctx, "dead letter audit", err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap(ctx, "dead letter audit", err)
	}
	return out, nil
}

// MarkMirrored records that dead letters ids were published to the DLQ
// topic, following [dlq.Store]. It may be called from any
// goroutine.
func (s *Sink) MarkMirrored(ctx context.Context, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	const op = "mark mirrored"
	tx, done, err := s.begin(ctx, op)
	if err != nil {
		return err
	}
	defer done()
	if _, err := tx.ExecContext(ctx, "UPDATE "+s.deadLetters+" SET mirrored = 1 WHERE id IN ("+strings.Repeat("?, ", len(ids)-1)+"?)", anys(ids)...); err != nil {
		return s.wrap(ctx, op, err)
	}
	return s.commit(ctx, tx, op)
}
