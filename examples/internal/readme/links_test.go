package readme

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"
)

// root is the repository's root, seen from this package's directory.
const root = "../../.."

// docFiles are the Markdown files whose relative links must lead
// somewhere: the README, CONTRIBUTING.md, every file of docs/ and the
// examples' own READMEs. Paths are slash-separated and relative to root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, pattern := range []string{"docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(pattern)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.ToSlash(rel))
		}
	}
	sort.Strings(files[2:])
	return files
}

// link is one link of a Markdown file: its target as written and the line
// it is on.
type link struct {
	line   int
	target string
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an
	// optional "title"; the text may hold one level of brackets.
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refDefinition matches a reference-style link's definition: [name]: target
	refDefinition = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	// codeSpan matches an inline code span, whose text is never a link.
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	// atxHeading matches a heading line: # Title, ## Title ##, …
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$`)
	// htmlAnchor matches an anchor written in HTML: <a id="x"> or name="x".
	htmlAnchor = regexp.MustCompile(`<[a-zA-Z][^>]*\s(?:id|name)="([^"]+)"`)
	// scheme matches a target that is not relative: https:, mailto:, …
	scheme = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	// lineAnchor is GitHub's anchor for lines of a file that is not Markdown.
	lineAnchor = regexp.MustCompile(`^L\d+(?:-L\d+)?$`)
	// markdownLinkText turns [text](target) into text, for a heading's slug.
	markdownLinkText = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// outsideCode calls fn with every line of a Markdown text that is not
// inside a fenced code block, numbered from 1.
func outsideCode(text string, fn func(n int, line string)) {
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~") {
			fence = trimmed[:3]
			for _, r := range trimmed[3:] {
				if r != rune(fence[0]) {
					break
				}
				fence += fence[:1]
			}
			continue
		}
		fn(i+1, line)
	}
}

// links returns every link of a Markdown text outside code blocks and code
// spans.
func links(text string) []link {
	var out []link
	outsideCode(text, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			out = append(out, link{line: n, target: m[1]})
		}
		if m := refDefinition.FindStringSubmatch(line); m != nil {
			out = append(out, link{line: n, target: m[1]})
		}
	})
	return out
}

// slug is GitHub's anchor for a heading: the heading's text as rendered
// (code spans and links reduced to their text, emphasis marks dropped),
// lowercased, spaces turned into '-', and every other character that is
// not a letter, a digit, '-' or '_' removed.
func slug(heading string) string {
	text := markdownLinkText.ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors a Markdown text defines: one per heading (a
// repeated slug gets -1, -2, … as on GitHub) and one per HTML id or name.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	outsideCode(text, func(_ int, line string) {
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			out[m[1]] = true
		}
	})
	return out
}

// checkTarget says what is wrong with a relative link target of the
// Markdown file from (slash-separated, relative to root), or "" when it
// leads to a file that exists and, with a fragment, to an anchor of it.
// anchorsOf reads a Markdown file's anchors.
func checkTarget(from, target string, anchorsOf func(file string) (map[string]bool, error)) string {
	file, fragment, _ := strings.Cut(target, "#")
	switch {
	case file == "":
		file = from
	case strings.HasPrefix(file, "/"):
		file = path.Clean(strings.TrimPrefix(file, "/"))
	default:
		file = path.Join(path.Dir(from), file)
	}
	if file == ".." || strings.HasPrefix(file, "../") {
		return "leads outside the repository"
	}
	info, err := os.Stat(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return fmt.Sprintf("%s does not exist", file)
	}
	if fragment == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(file, ".md") {
		if !info.IsDir() && lineAnchor.MatchString(fragment) {
			return ""
		}
		return fmt.Sprintf("#%s: %s is not a Markdown file, so it has no such anchor", fragment, file)
	}
	a, err := anchorsOf(file)
	if err != nil {
		return err.Error()
	}
	if !a[fragment] {
		return fmt.Sprintf("%s has no heading or anchor #%s", file, fragment)
	}
	return ""
}

// anchorCache reads each Markdown file's anchors once.
func anchorCache() func(file string) (map[string]bool, error) {
	cache := map[string]map[string]bool{}
	return func(file string) (map[string]bool, error) {
		if a, ok := cache[file]; ok {
			return a, nil
		}
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			return nil, err
		}
		cache[file] = anchors(string(raw))
		return cache[file], nil
	}
}

// TestRelativeLinks: every relative link of the README, CONTRIBUTING.md,
// docs/*.md and the examples' READMEs leads to a file of the repository
// that exists, and a #fragment to a heading (by GitHub's slug) or an HTML
// anchor of that file. A failure names the file, the line and the link.
func TestRelativeLinks(t *testing.T) {
	anchorsOf := anchorCache()
	checked := 0
	for _, file := range docFiles(t) {
		raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range links(string(raw)) {
			if scheme.MatchString(l.target) || strings.HasPrefix(l.target, "//") {
				continue
			}
			checked++
			if problem := checkTarget(file, l.target, anchorsOf); problem != "" {
				t.Errorf("%s:%d: link %s: %s", file, l.line, l.target, problem)
			}
		}
	}
	t.Logf("checked %d relative links", checked)
	if checked < 30 {
		t.Fatalf("checked %d relative links, want the README's and the docs' dozens: is the link pattern broken?", checked)
	}
}

// codeReference matches a mention of a Markdown file's anchor in code,
// comments, help text or manifests, such as docs/design.md#hazard-1.
var codeReference = regexp.MustCompile(`\b((?:docs/[A-Za-z0-9_.-]+|README|CONTRIBUTING)\.md)#([A-Za-z0-9_-]+)`)

// TestAnchorsNamedInCode: every anchor of docs/….md, README.md or
// CONTRIBUTING.md (written file#anchor) that a Go file or a YAML manifest of the
// repository names (doc comments, error messages, help text) is a heading
// or an anchor of that file, so that moving a section cannot leave a
// pointer to nowhere. A failure names the file, the line and the reference.
func TestAnchorsNamedInCode(t *testing.T) {
	anchorsOf := anchorCache()
	checked := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Not the repository's: git's own files, npm's packages, and
			// the scratch directory .gitignore keeps out of the tree.
			if name := d.Name(); name == ".git" || name == "node_modules" || p == filepath.Join(root, "tmp") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(p)
		if ext != ".go" && ext != ".yaml" && ext != ".yml" {
			return nil
		}
		raw, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(raw), "\n") {
			for _, m := range codeReference.FindAllStringSubmatch(line, -1) {
				checked++
				// The reference names the file from the repository's
				// root, whatever the directory of the code naming it.
				if problem := checkTarget("README.md", m[1]+"#"+m[2], anchorsOf); problem != "" {
					t.Errorf("%s:%d: %s#%s: %s", filepath.ToSlash(rel), i+1, m[1], m[2], problem)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("checked %d references", checked)
	if checked < 30 {
		t.Fatalf("checked %d references, want the doc comments' dozens: is the pattern broken?", checked)
	}
}

// TestSlug pins the slug rules the link checks rely on down to GitHub's
// own anchors for headings of this repository's docs.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"How fencing works, in five sentences":                 "how-fencing-works-in-five-sentences",
		"The embedded broker's rebalance livelock under churn": "the-embedded-brokers-rebalance-livelock-under-churn",
		"Runbook: the log changed under the checkpoint":        "runbook-the-log-changed-under-the-checkpoint",
		"Against raw franz-go, Sarama and unfenced writes":     "against-raw-franz-go-sarama-and-unfenced-writes",
		"The `workrouter_dead_letters` table":                  "the-workrouter_dead_letters-table",
		"Partitioners: murmur2 and librdkafka's CRC32":         "partitioners-murmur2-and-librdkafkas-crc32",
		"See [the design](docs/design.md) — *briefly*":         "see-the-design--briefly",
		"The CLI's rules": "the-clis-rules",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := anchors("# A\n## A\n```\n## B\n```\n## A\n<a id=\"hazard-1\"></a>text\n")
	for _, want := range []string{"a", "a-1", "a-2", "hazard-1"} {
		if !a[want] {
			t.Errorf("anchors: no %q in %v", want, a)
		}
	}
	if a["b"] {
		t.Errorf("anchors: a heading inside a code block counted: %v", a)
	}
}
