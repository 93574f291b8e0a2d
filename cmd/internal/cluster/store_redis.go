package cluster

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/workrouter/workrouter/examples/ledger"
	"github.com/workrouter/workrouter/sink/redis"
)

// ErrNotRedis is matched by the error of KillRedisClients on a sink that
// is not Redis.
var ErrNotRedis = errors.New("cluster: the sink is not Redis")

// openRedis opens the ledger sink on the Redis server at cfg.RedisURL, in a
// fresh key prefix (SchemaPrefix-<nanos>) that Close deletes.
func openRedis(ctx context.Context, cfg StoreConfig) (*Store, error) {
	base := cfg.SchemaPrefix
	if base == "" {
		base = "workrouter"
	}
	prefix := strings.ReplaceAll(fmt.Sprintf("%s-%d", base, time.Now().UnixNano()), "_", "-")
	s, err := redis.Open(ctx, redis.Config{URL: cfg.RedisURL, Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("cluster: Redis %w", err)
	}
	spec := withParam(cfg.RedisURL, "prefix", prefix)
	postings := func(ctx context.Context) ([]Posting, error) {
		ps, err := ledger.RedisPostings(ctx, s)
		if err != nil {
			return nil, err
		}
		out := make([]Posting, len(ps))
		for i, p := range ps {
			out[i] = Posting{TopicID: p.TopicID, Partition: p.Part, Offset: p.Off, Account: p.Account, ID: p.ID, Seq: p.Seq, Epoch: p.Epoch, Member: p.Member}
		}
		return out, nil
	}
	return &Store{
		spec:  spec,
		desc:  "Redis sink under key prefix " + prefix + " (deleted at the end)",
		redis: s,
		count: func(ctx context.Context, q string, args ...any) (int, error) {
			ps, err := postings(ctx)
			if err != nil {
				return 0, err
			}
			return countPostings(ps, q, args...)
		},
		verify:      func(ctx context.Context) (ledger.Report, error) { return ledger.VerifyRedis(ctx, s) },
		history:     s.History,
		fences:      s.Fences,
		postings:    postings,
		deadLetters: s,
		close: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.Drop(ctx)
			s.Close()
		},
	}, nil
}

// countQuery reads the count queries the harnesses run against
// ledger_postings: "SELECT count(*) FROM ledger_postings" with an optional
// WHERE of column = $n, column >= $n, column <= $n or id = 'text' terms
// joined by AND.
var (
	countQuery = regexp.MustCompile(`^SELECT count\(\*\) FROM ledger_postings(?: WHERE (.*))?$`)
	countTerm  = regexp.MustCompile(`^(part|off|epoch|member|id) (=|>=|<=) (\$\d+|'[^']*')$`)
)

// countPostings answers one of the count queries of the SQL sinks from
// the postings of a Redis sink; a query of another shape is an error
// that names it.
func countPostings(ps []Posting, q string, args ...any) (int, error) {
	m := countQuery.FindStringSubmatch(strings.Join(strings.Fields(q), " "))
	if m == nil {
		return 0, fmt.Errorf("cluster: the Redis store cannot answer the query %q", q)
	}
	type term struct{ col, op, val string }
	var terms []term
	if m[1] != "" {
		for _, t := range strings.Split(m[1], " AND ") {
			tm := countTerm.FindStringSubmatch(t)
			if tm == nil {
				return 0, fmt.Errorf("cluster: the Redis store cannot answer the condition %q of %q", t, q)
			}
			v := strings.Trim(tm[3], "'")
			if strings.HasPrefix(tm[3], "$") {
				i, _ := strconv.Atoi(tm[3][1:])
				if i < 1 || i > len(args) {
					return 0, fmt.Errorf("cluster: %q: no argument %s", q, tm[3])
				}
				v = fmt.Sprint(args[i-1])
			}
			terms = append(terms, term{tm[1], tm[2], v})
		}
	}
	n := 0
	for _, p := range ps {
		ok := true
		for _, t := range terms {
			var got string
			switch t.col {
			case "part":
				got = strconv.FormatInt(int64(p.Partition), 10)
			case "off":
				got = strconv.FormatInt(p.Offset, 10)
			case "epoch":
				got = strconv.FormatInt(int64(p.Epoch), 10)
			case "member":
				got = p.Member
			case "id":
				got = p.ID
			}
			switch t.op {
			case "=":
				ok = ok && got == t.val
			default:
				a, _ := strconv.ParseInt(got, 10, 64)
				b, err := strconv.ParseInt(t.val, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("cluster: %q: %s %s %q is not a number", q, t.col, t.op, t.val)
				}
				ok = ok && (t.op == ">=" && a >= b || t.op == "<=" && a <= b)
			}
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// Redis reports whether the sink is Redis.
func (s *Store) Redis() bool { return s.redis != nil }

// KillRedisClients kills (CLIENT KILL ID) the connections of the worker
// named name, which names them (client_name=name in its --sink, see
// WorkerSpec), and returns how many it killed and whether the last
// command of one of them was a script (EVALSHA or EVAL). It fails with
// ErrNotRedis on another sink.
func (s *Store) KillRedisClients(ctx context.Context, name string) (n int, lastScript bool, err error) {
	if s.redis == nil {
		return 0, false, ErrNotRedis
	}
	rdb := s.redis.Client()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, false, err
	}
	var ids, busyIDs []string
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != name {
			continue
		}
		ids = append(ids, f["id"])
		if c := f["cmd"]; c == "evalsha" || c == "eval" {
			busyIDs = append(busyIDs, f["id"])
		}
	}
	for _, id := range ids {
		if err := rdb.Do(ctx, "CLIENT", "KILL", "ID", id).Err(); err == nil {
			n++
		}
	}
	return n, len(busyIDs) > 0, nil
}

// redisWorkerSpec is spec with the worker's name as its connections'
// client name.
func redisWorkerSpec(spec, name string) string {
	return withParam(spec, "client_name", name)
}
