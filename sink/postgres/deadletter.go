package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/workrouter/workrouter/epochs"
	"github.com/workrouter/workrouter/sink"
	"github.com/workrouter/workrouter/sink/dlq"
)

// header is a record header as stored in the dead letters' headers column
// (JSON text; the value base64 as encoding/json writes []byte).
type header struct {
	K string `json:"k"`
	V []byte `json:"v"`
}

// DeadLetter stores rec as a dead letter of tok's scope and moves its
// checkpoint past it, following [sink.Sink.DeadLetter]. A lane's record
// (rec.Lane) goes through the transaction of a lane's Apply, with the
// dead letter's row as the effect of a batch of the record alone
// covering [rec.From, rec.Offset+1). A serial one takes one transaction:
// it locks the fence row and fails with a *[sink.FencedError] unless tok
// is exactly the holder, stores nothing for a replay (rec.Offset below
// NextOffset), and otherwise (rec.Offset at or above NextOffset, after a
// gap too) inserts the row (unique per scope, log and offset) and moves
// NextOffset to rec.Offset+1 with Apply's conditional UPDATE, whose row
// count must be 1 (else it rolls back and fails with a
// *[sink.FencedError]). It may be called from any goroutine.
func (s *Sink) DeadLetter(ctx context.Context, tok epochs.Token, rec sink.DeadRecord) (sink.DeadLetterResult, error) {
	defer s.views.drop(tok.Scope()) // view.go
	if err := sink.CheckDeadLetter(tok, rec, s.Features()); err != nil {
		return sink.DeadLetterResult{}, err
	}
	if rec.Lane {
		return s.deadLetterLane(ctx, tok, rec)
	}
	op := fmt.Sprintf("dead letter %s@%d", tok, rec.Offset)
	if err := s.writable(op); err != nil {
		return sink.DeadLetterResult{}, err
	}
	if err := s.check(ctx, op); err != nil {
		return sink.DeadLetterResult{}, err
	}
	hs := make([]header, len(rec.Headers))
	for i, h := range rec.Headers {
		hs[i] = header{h.Key, h.Value}
	}
	headers, err := json.Marshal(hs)
	if err != nil {
		return sink.DeadLetterResult{}, fmt.Errorf("postgres: %s: headers: %w", op, err)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op, err)
	}
	defer rollback(ctx, tx)
	row, err := s.lockFence(ctx, tx, tok.Scope())
	if errors.Is(err, pgx.ErrNoRows) {
		return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Offered: tok}
	}
	if err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op+": read fence", err)
	}
	if !tok.Holds(row.holder) {
		return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: row.holder, Offered: tok}
	}
	if row.gapped {
		return s.deadLetterOnGapped(ctx, tx, tok, row, rec, string(headers))
	}
	next, topicID := row.nextOffset, row.topicID
	if rec.Offset < next {
		return sink.DeadLetterResult{NextOffset: next}, nil
	}
	if rec.TopicID != "" {
		topicID = rec.TopicID
	}
	var id int64
	if err := tx.QueryRow(ctx, s.q.dlInsert, tok.Group, tok.Topic, tok.Partition, topicID, rec.Offset, rec.Key, rec.Value, string(headers),
		rec.Timestamp, rec.Reason, rec.Error, rec.Attempts, tok.Epoch, tok.Member).Scan(&id); err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op, err)
	}
	// The same conditional UPDATE as Apply's: with the row locked above
	// it matches, and a row count of 0 means the holder or NextOffset
	// moved after all; then nothing is stored (the deferred rollback).
	tag, err := tx.Exec(ctx, s.q.advance, tok.Group, tok.Topic, tok.Partition, tok.Epoch, tok.Member, next, rec.Offset+1)
	if err != nil {
		return sink.DeadLetterResult{}, wrap(ctx, op+": advance fence", err)
	}
	if tag.RowsAffected() != 1 {
		stored := row.holder
		var (
			epoch  int32
			member string
			cur    int64
		)
		if err := tx.QueryRow(ctx, s.q.fenceRead, tok.Group, tok.Topic, tok.Partition).Scan(&epoch, &member, &cur, new(int64), new(bool)); err == nil {
			stored = holderToken(tok.Scope(), epoch, member)
		}
		s.log.Warn("postgres sink: dead letter fenced at the conditional update", "token", tok.String(), "stored", stored.String(), "offset", rec.Offset)
		return sink.DeadLetterResult{}, &sink.FencedError{Op: sink.OpDeadLetter, Stored: stored, Offered: tok}
	}
	if err := tx.Commit(ctx); err != nil {
		return sink.DeadLetterResult{}, commitError(ctx, op, err)
	}
	return sink.DeadLetterResult{ID: id, Stored: true, NextOffset: rec.Offset + 1}, nil
}

func (s *Sink) scanDeadLetter(row pgx.Row) (dlq.Letter, error) {
	var (
		d              dlq.Letter
		headers, state string
		epoch          int32
		member         string
	)
	if err := row.Scan(&d.ID, &d.Scope.Group, &d.Scope.Topic, &d.Scope.Partition, &d.Record.TopicID, &d.Record.Offset,
		&d.Record.Key, &d.Record.Value, &headers, &d.Record.Timestamp, &d.Record.Reason, &d.Record.Error, &d.Record.Attempts,
		&epoch, &member, &d.At, &state, &d.Mirrored); err != nil {
		return d, err
	}
	var hs []header
	if err := json.Unmarshal([]byte(headers), &hs); err != nil {
		return d, err
	}
	for _, h := range hs {
		d.Record.Headers = append(d.Record.Headers, sink.RecordHeader{Key: h.K, Value: h.V})
	}
	d.State = dlq.State(state)
	d.Token = epochs.Token{Group: d.Scope.Group, Topic: d.Scope.Topic, Partition: d.Scope.Partition, Epoch: epoch, Member: member}
	return d, nil
}

// DeadLetters returns the dead letters that match f, by ID, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetters(ctx context.Context, f dlq.Filter) ([]dlq.Letter, error) {
	if err := s.check(ctx, "dead letters"); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	add := func(cond string, a any) {
		args = append(args, a)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if f.Group != "" {
		add("grp = $%d", f.Group)
	}
	if f.Topic != "" {
		add("topic = $%d", f.Topic)
	}
	if f.Partition != nil {
		add("part = $%d", *f.Partition)
	}
	if f.Reason != "" {
		add("reason = $%d", f.Reason)
	}
	if !f.Since.IsZero() {
		add("at >= $%d", f.Since)
	}
	if f.NotMirrored {
		where = append(where, "NOT mirrored")
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		add("state = ANY($%d)", states)
	}
	if len(f.IDs) > 0 {
		add("id = ANY($%d)", f.IDs)
	}
	q := "SELECT " + s.q.dlColumns + " FROM " + s.q.deadLetters
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id"
	if f.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", f.Limit)
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, wrap(ctx, "dead letters", err)
	}
	defer rows.Close()
	var out []dlq.Letter
	for rows.Next() {
		d, err := s.scanDeadLetter(rows)
		if err != nil {
			return nil, wrap(ctx, "dead letters", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(ctx, "dead letters", err)
	}
	return out, nil
}

// ResolveDeadLetter moves dead letter id from state from to to, as a
// compare-and-set, and appends an audit row, in one transaction, following
// [dlq.Store]. It may be called from any goroutine.
func (s *Sink) ResolveDeadLetter(ctx context.Context, id int64, from, to dlq.State, reason, detail string) (dlq.Letter, error) {
	op := fmt.Sprintf("dead letter %d %s→%s", id, from, to)
	if err := from.CheckResolve(to, strings.TrimSpace(reason)); err != nil {
		return dlq.Letter{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := s.writable(op); err != nil {
		return dlq.Letter{}, err
	}
	if err := s.check(ctx, op); err != nil {
		return dlq.Letter{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return dlq.Letter{}, wrap(ctx, op, err)
	}
	defer rollback(ctx, tx)
	d, err := s.scanDeadLetter(tx.QueryRow(ctx, "SELECT "+s.q.dlColumns+" FROM "+s.q.deadLetters+" WHERE id = $1 FOR UPDATE", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return dlq.Letter{}, fmt.Errorf("postgres: %s: %w", op, sink.ErrNotFound)
	}
	if err != nil {
		return dlq.Letter{}, wrap(ctx, op, err)
	}
	if d.State != from {
		return d, fmt.Errorf("postgres: %s: it is %s: %w", op, d.State, dlq.ErrState)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+s.q.deadLetters+" SET state = $2 WHERE id = $1", id, string(to)); err != nil {
		return dlq.Letter{}, wrap(ctx, op, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO "+s.q.dlAudit+" (id, from_state, to_state, reason, detail) VALUES ($1, $2, $3, $4, $5)",
		id, string(from), string(to), reason, detail); err != nil {
		return dlq.Letter{}, wrap(ctx, op, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return dlq.Letter{}, wrap(ctx, op+": commit", err)
	}
	d.State = to
	return d, nil
}

// DeadLetterAudit returns the audit rows of dead letter id, in order,
// following [dlq.Store]. It may be called from any goroutine.
func (s *Sink) DeadLetterAudit(ctx context.Context, id int64) ([]dlq.Action, error) {
	if err := s.check(ctx, "dead letter audit"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, "SELECT seq, id, from_state, to_state, reason, detail, at FROM "+s.q.dlAudit+" WHERE id = $1 ORDER BY seq", id)
	if err != nil {
		return nil, wrap(ctx, "dead letter audit", err)
	}
	var (
		a        dlq.Action
		from, to string
		out      []dlq.Action
	)
	_, err = pgx.ForEachRow(rows, []any{&a.Seq, &a.ID, &from, &to, &a.Reason, &a.Detail, &a.At}, func() error {
		a.From, a.To = dlq.State(from), dlq.State(to)
		out = append(out, a)
		return nil
	})
	if err != nil {
		return nil, wrap(ctx, "dead letter audit", err)
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
	if err := s.writable("mark mirrored"); err != nil {
		return err
	}
	if err := s.check(ctx, "mark mirrored"); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, "UPDATE "+s.q.deadLetters+" SET mirrored = true WHERE id = ANY($1)", ids); err != nil {
		return wrap(ctx, "mark mirrored", err)
	}
	return nil
}
