package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// fakeTool is a Tool whose behaviour each test sets.
type fakeTool struct {
	name, schema string
	run          func(ctx context.Context, call tools.Call) (string, error)
}

func (f fakeTool) Name() string        { return f.name }
func (f fakeTool) Description() string { return "test tool " + f.name }
func (f fakeTool) Schema() string      { return f.schema }
func (f fakeTool) Execute(ctx context.Context, c tools.Call) (string, error) {
	return f.run(ctx, c)
}

const priceSchema = `{
  "type": "object",
  "properties": {
    "ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"},
    "days": {"type": "integer", "minimum": 1, "maximum": 30},
    "max_price": {"type": "number", "maximum": 1000000}
  },
  "required": ["ticker"],
  "additionalProperties": false
}`

func TestExecute(t *testing.T) {
	t.Parallel()
	ran := 0
	price := fakeTool{name: "price", schema: priceSchema, run: func(_ context.Context, c tools.Call) (string, error) {
		ran++
		var a struct{ Ticker string }
		_ = json.Unmarshal(c.Arguments, &a)
		if a.Ticker == "FAIL" {
			return "", errors.New("upstream quote service returned 503")
		}
		return a.Ticker + " trades at 45.10", nil
	}}
	crash := fakeTool{name: "crash", schema: `{"type":"object"}`, run: func(context.Context, tools.Call) (string, error) {
		panic("nil map write")
	}}
	r, err := tools.NewRegistry(tools.Options{}, price, crash)
	if err != nil {
		t.Fatalf("NewRegistry: %v", err)
	}
	tests := []struct {
		name      string
		call      tools.Call
		wantError bool
		want      []string // substrings of the content
		wantRun   bool
	}{
		{"valid", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"BHP","days":5}`)}, false, []string{"BHP trades at 45.10"}, true},
		{"missing required property", tools.Call{Name: "price", Arguments: json.RawMessage(`{"days":5}`)}, true, []string{"invalid arguments for price", "missing property 'ticker'"}, false},
		{"wrong type", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"BHP","days":"five"}`)}, true, []string{"invalid arguments for price", "/days", "want integer"}, false},
		{"out of range", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"BHP","days":90}`)}, true, []string{"/days", "maximum"}, false},
		// The library panicked on a number big.Rat cannot hold (in the
		// chat loop's goroutine: outside this registry's recover).
		{"number past what can be checked", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"BHP","max_price":1e9999999}`)}, true, []string{"invalid arguments for price", "/max_price", "cannot be checked"}, false},
		{"additional property", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"BHP","exchange":"ASX"}`)}, true, []string{"additional properties 'exchange'"}, false},
		{"not JSON", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":`)}, true, []string{"not valid JSON"}, false},
		{"not an object", tools.Call{Name: "price", Arguments: json.RawMessage(`["BHP"]`)}, true, []string{"invalid arguments", "want object"}, false},
		{"unknown tool", tools.Call{Name: "quote", Arguments: json.RawMessage(`{}`)}, true, []string{`unknown tool "quote"`, "available tools: crash, price"}, false},
		{"tool error", tools.Call{Name: "price", Arguments: json.RawMessage(`{"ticker":"FAIL"}`)}, true, []string{"error: upstream quote service returned 503"}, true},
		{"panic", tools.Call{Name: "crash", Arguments: json.RawMessage(`{}`)}, true, []string{"crash crashed: nil map write"}, false},
		{"empty arguments mean {}", tools.Call{Name: "crash", Arguments: nil}, true, []string{"crashed"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := ran
			res := r.Execute(context.Background(), tc.call)
			if res.IsError != tc.wantError {
				t.Errorf("IsError = %v, want %v (content %q)", res.IsError, tc.wantError, res.Content)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Content, w) {
					t.Errorf("content %q does not contain %q", res.Content, w)
				}
			}
			if got := ran > before; got != tc.wantRun {
				t.Errorf("tool ran = %v, want %v", got, tc.wantRun)
			}
			if strings.Contains(res.Content, "mem:///") {
				t.Errorf("content leaks the schema URL: %q", res.Content)
			}
		})
	}
}

func TestTimeoutAndTruncation(t *testing.T) {
	t.Parallel()
	slow := fakeTool{name: "slow", schema: `{"type":"object"}`, run: func(ctx context.Context, _ tools.Call) (string, error) {
		<-ctx.Done()
		return "", ctx.Err()
	}}
	big := fakeTool{name: "big", schema: `{"type":"object"}`, run: func(context.Context, tools.Call) (string, error) {
		return strings.Repeat("é", 1000), nil // 2,000 bytes
	}}
	r, err := tools.NewRegistry(tools.Options{Timeout: 50 * time.Millisecond, MaxResultBytes: 100}, slow, big)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Execute(context.Background(), tools.Call{Name: "slow"})
	if !res.IsError || !strings.Contains(res.Content, "slow timed out after 50ms") {
		t.Errorf("slow tool: %+v, want an error saying it timed out", res)
	}
	if res.Duration < 50*time.Millisecond {
		t.Errorf("slow tool took %v, less than its timeout", res.Duration)
	}
	res = r.Execute(context.Background(), tools.Call{Name: "big"})
	if len(res.Content) > 100 || !strings.HasSuffix(res.Content, "[output truncated]") || !json.Valid([]byte(`"`+res.Content[:len(res.Content)-len("\n[output truncated]")]+`"`)) {
		t.Errorf("big output = %d bytes %q, want <= 100 ending in a truncation note on a rune boundary", len(res.Content), res.Content)
	}
}

func TestNewRegistryRejects(t *testing.T) {
	t.Parallel()
	ok := fakeTool{name: "ok", schema: `{"type":"object"}`}
	tests := []struct {
		name  string
		tools []tools.Tool
		want  string
	}{
		{"duplicate", []tools.Tool{ok, ok}, "registered twice"},
		{"bad name", []tools.Tool{fakeTool{name: "has space", schema: `{"type":"object"}`}}, "invalid tool name"},
		{"schema not JSON", []tools.Tool{fakeTool{name: "x", schema: `{`}}, "not JSON"},
		{"schema not an object", []tools.Tool{fakeTool{name: "x", schema: `{"type":"string"}`}}, `"type": "object"`},
		{"schema invalid", []tools.Tool{fakeTool{name: "x", schema: `{"type":"object","properties":{"a":{"type":"nonsense"}}}`}}, "schema of x"},
		{"external ref", []tools.Tool{fakeTool{name: "x", schema: `{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`}}, "schema of x"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tools.NewRegistry(tools.Options{}, tc.tools...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewRegistry: got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDefinitionsSorted(t *testing.T) {
	t.Parallel()
	r, err := tools.NewRegistry(tools.Options{},
		fakeTool{name: "zeta", schema: `{"type":"object"}`}, fakeTool{name: "alpha", schema: priceSchema})
	if err != nil {
		t.Fatal(err)
	}
	defs := r.Definitions()
	if len(defs) != 2 || defs[0].Name != "alpha" || defs[1].Name != "zeta" || defs[0].Schema != priceSchema || defs[0].Description != "test tool alpha" {
		t.Errorf("Definitions() = %+v, want alpha then zeta with their schemas", defs)
	}
}
