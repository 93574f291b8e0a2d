package spantext

import (
	"errors"
	"slices"
	"testing"

	"github.com/workrouter/workrouter/sink"
)

// TestSpansText: Format and Parse round-trip done spans through
// the text the SQL backends' histories store, and ParseSpans refuses text
// that is not valid spans.
func TestSpansText(t *testing.T) {
	for _, spans := range [][]sink.Span{nil, {{From: 3, To: 5}}, {{From: 0, To: 1}, {From: 7, To: 8}, {From: 10, To: 1 << 40}}} {
		text := Format(spans)
		got, err := Parse(text)
		if err != nil || !slices.Equal(got, spans) {
			t.Errorf("Parse(Format(%v) = %q) = %v, %v", spans, text, got, err)
		}
	}
	if text := Format([]sink.Span{{From: 3, To: 5}, {From: 7, To: 8}}); text != "3-5,7-8" {
		t.Errorf("Format = %q, want 3-5,7-8", text)
	}
	for _, bad := range []string{"3", "3-", "-5", "a-b", "5-3", "3-3", "3-5,4-6", "3-5,5-6", "3-5,", "-1-2"} {
		if got, err := Parse(bad); !errors.Is(err, sink.ErrBadCheckpoint) {
			t.Errorf("Parse(%q) = %v, %v; want ErrBadCheckpoint", bad, got, err)
		}
	}
}
