// Command capture writes the seeds of FuzzDecode's corpus. The records
// that package router writes and one record for each way a record can be
// malformed are built here (hand-*); then it starts kfake, has kcat, confluent-kafka-python and kafka-python (the
// system /usr/bin/python3) produce a few command records each, takes every
// record's bytes from the produce requests as the clients wrote them, and
// writes each as a corpus file to the directory given as its argument.
//
//	go run ./envelope/testdata/capture envelope/testdata/fuzz/FuzzDecode
//
// A client that is not installed is reported and left out.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/workrouter/workrouter/epochs"
)

// record is one record a client is asked to produce.
type record struct {
	name    string
	key     string
	value   string // "" is a null value
	headers [][2]string
}

var records = []record{
	{"command", "account-7", `{"amount":12}`, [][2]string{{"workrouter-type", "ledger.post"}, {"workrouter-id", "order-1"}, {"trace", "abc"}}},
	{"minimal", "k", "v", [][2]string{{"workrouter-type", "t"}}},
	{"nullvalue", "k", "", [][2]string{{"workrouter-type", "t"}, {"empty", ""}}},
	{"notype", "k", "v", [][2]string{{"trace", "abc"}}},
}

const python = `
import sys, json
recs = json.loads(sys.argv[3])
if sys.argv[1] == "confluent":
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[2], "enable.idempotence": False, "compression.type": "none", "linger.ms": 0})
    for r in recs:
        p.produce("t", key=r["key"].encode(), value=(r["value"].encode() if r["value"] else None),
                  headers=[(k, v.encode()) for k, v in r["headers"]])
        p.flush(10)
else:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=[sys.argv[2]], api_version=(2, 5, 0))
    for r in recs:
        p.send("t", key=r["key"].encode(), value=(r["value"].encode() if r["value"] else None),
               headers=[(k, v.encode()) for k, v in r["headers"]]).get(timeout=10)
    p.flush()
`

// handmade are the records built here rather than captured, each a list of
// header key and value pairs after its key and value.
func handmade() map[string]kmsg.Record {
	tok := epochs.Token{Group: "g", Topic: "cmds", Partition: 3, Epoch: 7, Member: "m-1"}
	_, tokv, err := tok.Header()
	if err != nil {
		panic(err)
	}
	_, badTok, err := epochs.Token{Group: "g", Topic: "cmds", Partition: -1, Epoch: 7, Member: "m"}.Header()
	if err != nil {
		panic(err)
	}
	h := func(kv ...string) []kmsg.Header {
		var out []kmsg.Header
		for i := 0; i < len(kv); i += 2 {
			out = append(out, kmsg.Header{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return out
	}
	typ := func(more ...string) []kmsg.Header { return h(append([]string{"workrouter-type", "t"}, more...)...) }
	rec := func(key string, hs []kmsg.Header) kmsg.Record {
		return kmsg.Record{Key: []byte(key), Value: []byte("payload"), Headers: hs}
	}
	return map[string]kmsg.Record{
		// As package router writes them.
		"hand-router-upstream":   rec("account-7", typ("workrouter-id", "0190c7a2-5f1e-7cc0-b9a4-3f1f0a6f9b21", "workrouter-token", string(tokv))),
		"hand-router-redrive":    rec("account-7", typ("workrouter-id", "order-1", "trace", "abc", "workrouter-redrive-of", "dlq/0@12", "workrouter-redrive-for", "billing")),
		"hand-unknown-reserved":  rec("k", typ("workrouter-future", "x", "user", "")),
		"hand-id-utf8":           rec("k", typ("workrouter-id", "commande-é-1")),
		"hand-id-longest":        rec("k", typ("workrouter-id", strings.Repeat("i", 128))),
		"hand-null-header-value": {Key: []byte("k"), Headers: []kmsg.Header{{Key: "workrouter-type", Value: []byte("t")}, {Key: "user"}}},
		// One per malformation.
		"hand-bad-null-key":        {Headers: typ()},
		"hand-bad-empty-key":       rec("", typ()),
		"hand-bad-no-type":         rec("k", h("user", "x")),
		"hand-bad-empty-type":      rec("k", h("workrouter-type", "")),
		"hand-bad-two-types":       rec("k", typ("workrouter-type", "u")),
		"hand-bad-two-ids":         rec("k", typ("workrouter-id", "a", "workrouter-id", "b")),
		"hand-bad-empty-id":        rec("k", typ("workrouter-id", "")),
		"hand-bad-long-id":         rec("k", typ("workrouter-id", strings.Repeat("i", 129))),
		"hand-bad-control-id":      rec("k", typ("workrouter-id", "a\x01b")),
		"hand-bad-unicode-control": rec("k", typ("workrouter-id", "a\u0085b")),
		"hand-bad-invalid-utf8-id": rec("k", typ("workrouter-id", "a\xffb")),
		"hand-bad-two-redrive-for": rec("k", typ("workrouter-redrive-for", "a", "workrouter-redrive-for", "b")),
		"hand-bad-empty-redrive":   rec("k", typ("workrouter-redrive-for", "")),
		"hand-bad-two-tokens":      rec("k", typ("workrouter-token", string(tokv), "workrouter-token", string(tokv))),
		"hand-bad-token-bytes":     rec("k", typ("workrouter-token", "\x01\x02")),
		"hand-bad-token-invalid":   rec("k", typ("workrouter-token", string(badTok))),
	}
}

// wire returns r as it is written on the wire, its length first.
func wire(r kmsg.Record) []byte {
	r.Length = int32(len(r.AppendTo(nil)) - 1) // a length of 0 takes one byte
	b := r.AppendTo(nil)
	if l, k := binary.Varint(b); int(l) != len(b)-k {
		panic("length")
	}
	return b
}

func write(dir, name string, b []byte) {
	f := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
	if err := os.WriteFile(filepath.Join(dir, name), []byte(f), 0o644); err != nil {
		panic(err)
	}
	fmt.Println(name, len(b), "bytes")
}

func main() {
	dir := os.Args[1]
	for name, r := range handmade() {
		write(dir, name, wire(r))
	}
	var (
		mu       sync.Mutex
		captured [][]byte
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range t.Partitions {
				mu.Lock()
				captured = append(captured, splitBatches(p.Records)...)
				mu.Unlock()
			}
		}
		return nil, nil, false
	})
	addr := c.ListenAddrs()[0]
	js := `[`
	for i, r := range records {
		if i > 0 {
			js += ","
		}
		hs := `[`
		for j, h := range r.headers {
			if j > 0 {
				hs += ","
			}
			hs += fmt.Sprintf("[%q,%q]", h[0], h[1])
		}
		js += fmt.Sprintf(`{"key":%q,"value":%q,"headers":%s]}`, r.key, r.value, hs)
	}
	js += `]`
	run := func(client string, names []string, cmds ...*exec.Cmd) {
		mu.Lock()
		captured = nil
		mu.Unlock()
		for _, cmd := range cmds {
			if out, err := cmd.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v: %s\n", client, err, out)
				return
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i, b := range captured {
			name := fmt.Sprintf("%s-%d", client, i)
			if i < len(names) {
				name = client + "-" + names[i]
			}
			write(dir, name, b)
		}
	}
	var (
		kcat  []*exec.Cmd
		names []string
	)
	for _, r := range records {
		if r.value == "" {
			continue // kcat skips an empty line rather than send a null value
		}
		names = append(names, r.name)
		args := []string{"-P", "-b", addr, "-t", "t", "-k", r.key}
		for _, h := range r.headers {
			args = append(args, "-H", h[0]+"="+h[1])
		}
		cmd := exec.Command("kcat", args...)
		cmd.Stdin = strings.NewReader(r.value + "\n")
		kcat = append(kcat, cmd)
	}
	run("kcat", names, kcat...)
	names = nil
	for _, r := range records {
		names = append(names, r.name)
	}
	run("confluent-kafka-python", names, exec.Command("/usr/bin/python3", "-c", python, "confluent", addr, js))
	run("kafka-python", names, exec.Command("/usr/bin/python3", "-c", python, "kafka-python", addr, js))
}

// splitBatches returns the records of the v2 record batches in b, each as
// its bytes on the wire (its varint length first).
func splitBatches(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 12 {
		n := int(binary.BigEndian.Uint32(b[8:12])) + 12
		var batch kmsg.RecordBatch
		if err := batch.ReadFrom(b[:n]); err != nil {
			panic(err)
		}
		if batch.Attributes&7 != 0 {
			panic("compressed batch")
		}
		recs := batch.Records
		for i := int32(0); i < batch.NumRecords; i++ {
			l, k := binary.Varint(recs)
			out = append(out, append([]byte(nil), recs[:k+int(l)]...))
			recs = recs[k+int(l):]
		}
		b = b[n:]
	}
	return out
}
