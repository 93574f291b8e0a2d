// Package spantext is the text form the backends store done spans in
// (sink.Span, fenceadmin.Entry.Done): "from-to,from-to", To excluded.
package spantext

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/workrouter/workrouter/sink"
)

// Format encodes spans as text, "from-to,from-to" (To excluded; ""
// for none), the form the SQL backends store a claim's done spans in
// (fenceadmin.Entry.Done), and Redis its checkpoint's. It may be called from any goroutine.
func Format(spans []sink.Span) string {
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// Parse decodes what Format encoded; nil for "". Text that is
// not spans, or spans that are empty, out of order or overlapping, fail
// with an error matching sink.ErrBadCheckpoint. It may be called from any
// goroutine.
func Parse(text string) ([]sink.Span, error) {
	if text == "" {
		return nil, nil
	}
	var out []sink.Span
	for part := range strings.SplitSeq(text, ",") {
		from, to, ok := strings.Cut(part, "-")
		f, err1 := strconv.ParseInt(from, 10, 64)
		t, err2 := strconv.ParseInt(to, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: done spans %q: %q is not from-to", sink.ErrBadCheckpoint, text, part)
		}
		if t <= f || f < 0 || len(out) > 0 && f <= out[len(out)-1].To {
			return nil, fmt.Errorf("%w: done spans %q: [%d, %d) is empty or does not follow the span before it", sink.ErrBadCheckpoint, text, f, t)
		}
		out = append(out, sink.Span{From: f, To: t})
	}
	return out, nil
}
