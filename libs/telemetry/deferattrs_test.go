package telemetry

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/slogtest"
)

// The deferring handler keeps every behaviour slog requires of a handler
// (attributes and groups in order, empty groups and attributes dropped...),
// checked by the standard library's own handler test.
func TestDeferAttrsIsAHandler(t *testing.T) {
	var buf bytes.Buffer
	h := DeferAttrs(slog.NewJSONHandler(&buf, nil))
	results := func() []map[string]any {
		var out []map[string]any
		for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
			if line == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatal(err)
			}
			out = append(out, m)
		}
		return out
	}
	if err := slogtest.TestHandler(h, results); err != nil {
		t.Fatal(err)
	}
}

// With on a disabled level formats nothing: the attribute's value is not
// even asked for its text.
func TestDeferAttrsFormatsOnlyWrittenRecords(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(DeferAttrs(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError})))
	v := &countingValue{}
	l.With(slog.Any("args", v)).DebugContext(context.Background(), ">>> UPDATE")
	if v.n != 0 || buf.Len() != 0 {
		t.Fatalf("a debug line off: formatted %d times, wrote %q", v.n, buf.String())
	}
	l.With(slog.Any("args", v)).Error("failed")
	if v.n != 1 || !strings.Contains(buf.String(), "args=formatted") {
		t.Fatalf("an error line: formatted %d times, wrote %q", v.n, buf.String())
	}
}

type countingValue struct{ n int }

func (c *countingValue) String() string { c.n++; return "formatted" }
