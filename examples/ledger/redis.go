package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"

	"github.com/workrouter/workrouter/consumer"
	"github.com/workrouter/workrouter/sink/redis"
)

// The example's keys on a sink/redis sink (handler keys: the server key
// is redis.Sink.Key of them): the balance of an account is the string
// ledger:balance:<account>, its postings the list ledger:postings:<account>
// (JSON, in offset order), and the set ledger:accounts names the accounts.
const (
	redisBalance     = "ledger:balance:"
	redisPostingsKey = "ledger:postings:"
	redisAccounts    = "ledger:accounts"
)

// RedisPosting is one element of an account's postings list (JSON), as
// [RedisPostings] returns it.
type RedisPosting struct {
	TopicID string `json:"topic_id"`
	Topic   string `json:"topic"`
	Part    int32  `json:"part"`
	Off     int64  `json:"off"`
	ID      string `json:"id"`
	Seq     int    `json:"seq"`
	Kind    string `json:"kind"`
	Amount  int64  `json:"amount"`
	Epoch   int32  `json:"epoch"`
	Member  string `json:"member"`
	// Account is the account whose list holds the posting (not stored
	// in the element).
	Account string `json:"-"`
}

// RedisHandlers returns the example's handlers for a sink/redis sink, by
// command type ([TypeDeposit], [TypeWithdraw]). Their writes are buffered
// in the *redis.Tx and run by the sink's fenced script; the withdrawal's
// overdraft rule reads the balance through the Tx, and the script checks
// that the balance it read is still the stored one. Each call returns a
// new map.
func RedisHandlers() map[string]consumer.Handler[*redis.Tx] {
	post := func(tx *redis.Tx, cmd consumer.Command, p payload, kind string) error {
		b, err := json.Marshal(RedisPosting{TopicID: cmd.TopicID, Topic: cmd.Token.Topic, Part: cmd.Token.Partition, Off: cmd.Offset,
			ID: p.ID, Seq: p.Seq, Kind: kind, Amount: p.Amount, Epoch: cmd.Token.Epoch, Member: cmd.Token.Member})
		if err != nil {
			return fmt.Errorf("ledger: posting %s %q: %w", kind, p.ID, err)
		}
		account := string(cmd.Key)
		tx.SAdd(redisAccounts, account)
		tx.RPush(redisPostingsKey+account, string(b))
		return nil
	}
	return map[string]consumer.Handler[*redis.Tx]{
		TypeDeposit: func(ctx context.Context, tx *redis.Tx, cmd consumer.Command) error {
			p, err := decode(cmd)
			if err != nil {
				return consumer.Permanent(err)
			}
			tx.IncrBy(redisBalance+string(cmd.Key), p.Amount)
			return post(tx, cmd, p, KindDeposit)
		},
		TypeWithdraw: func(ctx context.Context, tx *redis.Tx, cmd consumer.Command) error {
			p, err := decode(cmd)
			if err != nil {
				return consumer.Permanent(err)
			}
			v, _, err := tx.Get(ctx, redisBalance+string(cmd.Key))
			if err != nil {
				return fmt.Errorf("ledger: withdraw %q: %w", p.ID, err)
			}
			bal := int64(0)
			if v != "" {
				if bal, err = strconv.ParseInt(v, 10, 64); err != nil {
					return fmt.Errorf("ledger: withdraw %q: balance %q: %w", p.ID, v, err)
				}
			}
			if bal < p.Amount {
				return post(tx, cmd, p, KindRefused)
			}
			tx.IncrBy(redisBalance+string(cmd.Key), -p.Amount)
			return post(tx, cmd, p, KindWithdraw)
		},
	}
}

// VerifyRedis reads the example's keys from s and reports their
// invariants as [VerifySQLite] does. It reads account by account (Redis
// has no read snapshot): run it when the workers are idle.
func VerifyRedis(ctx context.Context, s *redis.Sink) (Report, error) {
	rdb := s.Client()
	accounts, err := rdb.SMembers(ctx, s.Key(redisAccounts)).Result()
	if err != nil {
		return Report{}, fmt.Errorf("ledger: verify: %w", err)
	}
	r := Report{Accounts: len(accounts), Seqs: map[string][]int{}}
	seen := map[string]int{}
	for _, a := range accounts {
		raw, err := rdb.LRange(ctx, s.Key(redisPostingsKey+a), 0, -1).Result()
		if err != nil {
			return Report{}, fmt.Errorf("ledger: verify: %w", err)
		}
		var sum int64
		last := -1
		for _, x := range raw {
			var p RedisPosting
			if err := json.Unmarshal([]byte(x), &p); err != nil {
				return Report{}, fmt.Errorf("ledger: verify %s: %w", a, err)
			}
			r.Postings++
			seen[p.ID]++
			if seen[p.ID] == 2 {
				r.Duplicates++
			}
			if p.Seq <= last {
				r.OrderViolations++
			}
			last = p.Seq
			r.Seqs[a] = append(r.Seqs[a], p.Seq)
			switch p.Kind {
			case KindDeposit:
				sum += p.Amount
			case KindWithdraw:
				sum -= p.Amount
			case KindRefused:
				r.Refused++
			}
		}
		bal := int64(0)
		if v, err := rdb.Get(ctx, s.Key(redisBalance+a)).Result(); err == nil {
			bal, _ = strconv.ParseInt(v, 10, 64)
		}
		if bal != sum || bal < 0 {
			r.Mismatches = append(r.Mismatches, a)
		}
	}
	sort.Strings(r.Mismatches)
	return r, nil
}

// RedisPostings returns every posting the example's handlers wrote to s,
// by partition and offset. It may be called from any goroutine.
func RedisPostings(ctx context.Context, s *redis.Sink) ([]RedisPosting, error) {
	rdb := s.Client()
	accounts, err := rdb.SMembers(ctx, s.Key(redisAccounts)).Result()
	if err != nil {
		return nil, fmt.Errorf("ledger: postings: %w", err)
	}
	var out []RedisPosting
	for _, a := range accounts {
		raw, err := rdb.LRange(ctx, s.Key(redisPostingsKey+a), 0, -1).Result()
		if err != nil {
			return nil, fmt.Errorf("ledger: postings: %w", err)
		}
		for _, x := range raw {
			var p RedisPosting
			if err := json.Unmarshal([]byte(x), &p); err != nil {
				return nil, fmt.Errorf("ledger: postings of %s: %w", a, err)
			}
			p.Account = a
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Part != out[j].Part {
			return out[i].Part < out[j].Part
		}
		return out[i].Off < out[j].Off
	})
	return out, nil
}
