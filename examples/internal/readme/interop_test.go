package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// codeBlock is a fenced code block of a Markdown file.
type codeBlock struct {
	file, lang string
	line       int // of the opening fence
	body       string
}

// codeBlocks returns the fenced code blocks of a Markdown text.
func codeBlocks(file, text string) []codeBlock {
	var out []codeBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "```") {
			continue
		}
		b := codeBlock{file: file, lang: strings.TrimPrefix(l, "```"), line: i + 1}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != "```" {
			j++
		}
		b.body = strings.Join(lines[i+1:min(j, len(lines))], "\n")
		out = append(out, b)
		i = j
	}
	return out
}

var (
	// continuation joins a shell line ending in \ or | with the next.
	continuation = regexp.MustCompile(`(\\|\|)[ \t]*\n[ \t]*`)
	// kcatProduce matches a kcat invocation in producer mode (or .ci/run's
	// sasl_kcat, which runs kcat), as a command of a pipeline.
	kcatProduce = regexp.MustCompile(`(?:^|[|;&]|\bdo\b)\s*(?:timeout \d+\s+)?(?:sasl_)?kcat\b[^\n]*\s-P(\s|$)`)
	// idHeader matches kcat's -H of the command ID, and captures it.
	idHeader = regexp.MustCompile(`-H\s+"?workrouter-id=([^"\s]+)`)
	// payloadID captures the "id" field of a kcat record's JSON payload
	// (the application's own ID of the command).
	payloadID = regexp.MustCompile(`\\?"id\\?":\\?"([^"\\]+)`)
	// pyProduce matches the start of a confluent-kafka-python produce call.
	pyProduce = regexp.MustCompile(`\.produce\(`)
	// jsTyped matches a KafkaJS message's command type header.
	jsTyped = regexp.MustCompile(`'workrouter-type'\s*:`)
)

// producer is one producing example: where it is, the command ID it
// gives (its text as written; "" if none) and the application's ID of
// the command in its payload ("" if it cannot be read).
type producer struct {
	where, id, payload string
}

// producers returns the producing statements of a shell, Python or
// JavaScript text: kcat -P pipelines, .produce( calls and KafkaJS
// messages with a workrouter-type header.
func producers(where, lang, body string) []producer {
	var out []producer
	switch lang {
	case "sh", "bash", "shell", "":
		joined := continuation.ReplaceAllStringFunc(body, func(m string) string {
			if m[0] == '|' {
				return "| "
			}
			return " "
		})
		for _, stmt := range strings.Split(joined, "\n") {
			if !kcatProduce.MatchString(stmt) || strings.HasPrefix(strings.TrimSpace(stmt), "#") {
				continue
			}
			p := producer{where: where + ": " + strings.TrimSpace(stmt)}
			if m := idHeader.FindStringSubmatch(stmt); m != nil {
				p.id = m[1]
			}
			if m := payloadID.FindStringSubmatch(stmt); m != nil {
				p.payload = m[1]
			}
			out = append(out, p)
		}
	case "python", "py":
		for _, loc := range pyProduce.FindAllStringIndex(body, -1) {
			depth, end := 0, loc[1]-1
			for ; end < len(body); end++ {
				if body[end] == '(' {
					depth++
				} else if body[end] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			call := body[loc[0]:min(end+1, len(body))]
			p := producer{where: where + ": " + strings.Fields(call)[0]}
			if strings.Contains(call, `"workrouter-id"`) {
				p.id = call
			}
			out = append(out, p)
		}
	case "js", "javascript":
		for _, loc := range jsTyped.FindAllStringIndex(body, -1) {
			end := strings.IndexByte(body[loc[1]:], '}')
			if end < 0 {
				end = len(body) - loc[1]
			}
			headers := body[loc[0] : loc[1]+end]
			p := producer{where: where + ": " + headers}
			if strings.Contains(headers, `'workrouter-id'`) {
				p.id = headers
			}
			out = append(out, p)
		}
	}
	return out
}

// TestInteropDocsCarryIDs: every example that produces workrouter
// commands with another client — in the docs' code blocks and in .ci/run
// — gives each command a workrouter-id, kcat sends one command per run
// (its -H sets the header of every record of the run), and no two
// examples send one command (the application's ID in the payload) under
// two command IDs: run in order, they apply nothing twice.
func TestInteropDocsCarryIDs(t *testing.T) {
	var all []producer
	for _, f := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range codeBlocks(f, string(raw)) {
			all = append(all, producers(f+":"+itoa(b.line), b.lang, b.body)...)
		}
	}
	raw, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, producers(".ci/run", "sh", string(raw))...)
	if len(all) < 5 {
		t.Fatalf("found %d producing examples, want the docs' kcat, Python and KafkaJS ones and .ci/run's", len(all))
	}
	idOf := map[string]string{} // payload ID → command ID
	for _, p := range all {
		t.Logf("%s (ID %q, payload ID %q)", p.where, p.id, p.payload)
		if p.id == "" {
			t.Errorf("%s\n\tproduces a command without a workrouter-id: run twice, or after another example that sends it, it is applied twice", p.where)
			continue
		}
		if strings.Contains(p.where, "kcat") && !strings.Contains(p.where, "echo ") {
			t.Errorf("%s\n\tsends kcat's input from a file or a stream: -H gives all its records one ID, so all but the first would be skipped; send one command per run", p.where)
		}
		if p.payload == "" {
			continue
		}
		if prev, ok := idOf[p.payload]; ok && prev != p.id {
			t.Errorf("%s\n\tsends command %q under ID %q, which another example sends under %q: both are applied", p.where, p.payload, p.id, prev)
		}
		idOf[p.payload] = p.id
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
