package tools

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, a, b string
		same       bool
	}{
		{"key order", `{"b":1,"a":"x"}`, `{"a":"x","b":1}`, true},
		{"whitespace", "{ \"a\" :\n [1, 2] }", `{"a":[1,2]}`, true},
		{"integral spellings", `{"n":1.0}`, `{"n":1e0}`, true},
		{"nested order", `{"o":{"z":1,"y":2}}`, `{"o":{"y":2,"z":1}}`, true},
		{"html kept", `{"q":"a<b&c"}`, `{"q":"a\u003cb\u0026c"}`, true},
		{"different values", `{"n":1}`, `{"n":2}`, false},
		{"fraction differs from integer", `{"n":1.5}`, `{"n":1}`, false},
		{"array order matters", `{"a":[1,2]}`, `{"a":[2,1]}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := Canonical([]byte(tc.a))
			if err != nil {
				t.Fatal(err)
			}
			cb, err := Canonical([]byte(tc.b))
			if err != nil {
				t.Fatal(err)
			}
			if (string(ca) == string(cb)) != tc.same {
				t.Errorf("Canonical(%s)=%s, Canonical(%s)=%s, want same=%v", tc.a, ca, tc.b, cb, tc.same)
			}
		})
	}
	if got, _ := Canonical([]byte(`{"b":[1.0,"<"],"a":{"d":2.5,"c":null}}`)); string(got) != `{"a":{"c":null,"d":2.5},"b":[1,"<"]}` {
		t.Errorf("canonical text %s", got)
	}
	for _, bad := range []string{`{"a":1} {"b":2}`, `{"a":`, ``} {
		if _, err := Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%q) accepted", bad)
		}
	}
}

func TestIdempotencyKeyStableAcrossSpellings(t *testing.T) {
	t.Parallel()
	a, _ := Canonical([]byte(`{"ticker":"BHP","report_type":"quarterly"}`))
	b, _ := Canonical([]byte(`{"report_type": "quarterly", "ticker": "BHP"}`))
	ka, kb := IdempotencyKey("p1", "get_financials", a), IdempotencyKey("p1", "get_financials", b)
	if ka != kb {
		t.Fatalf("keys differ: %s vs %s", ka, kb)
	}
	if !strings.HasPrefix(ka, "p1/get_financials/") {
		t.Errorf("key %s does not name parent and tool", ka)
	}
	if IdempotencyKey("p2", "get_financials", a) == ka || IdempotencyKey("p1", "get_stock_price", a) == ka {
		t.Error("parent or tool does not change the key")
	}
}

func testRegistry(t *testing.T) *Registry {
	t.Helper()
	r := NewRegistry()
	if err := r.Define(Definition{
		Name: "get_price", Description: "price",
		Parameters: json.RawMessage(`{"type":"object","additionalProperties":false,"properties":{"ticker":{"type":"string","minLength":1},"period":{"enum":["1d","1y"]}},"required":["ticker"]}`),
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRegistryValidate(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	tests := []struct {
		name, tool, args string
		want             error
		mention          string
	}{
		{"valid", "get_price", `{"period":"1d","ticker":"BHP"}`, nil, ""},
		{"unknown tool", "get_weather", `{}`, ErrUnknownTool, "get_weather"},
		{"missing required", "get_price", `{"period":"1d"}`, ErrInvalidArguments, "ticker"},
		{"enum violated", "get_price", `{"ticker":"BHP","period":"5y"}`, ErrInvalidArguments, "/period"},
		{"extra property", "get_price", `{"ticker":"BHP","x":1}`, ErrInvalidArguments, "x"},
		{"not an object", "get_price", `["BHP"]`, ErrInvalidArguments, "object"},
		{"not JSON", "get_price", `{ticker: BHP}`, ErrInvalidArguments, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			canon, err := r.Validate(tc.tool, []byte(tc.args))
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Validate = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
			if err == nil && string(canon) != `{"period":"1d","ticker":"BHP"}` {
				t.Errorf("canonical args %s", canon)
			}
		})
	}
}

func TestRegistryDefinitionsAndCheck(t *testing.T) {
	t.Parallel()
	r := testRegistry(t)
	if err := r.Check(); err == nil || !strings.Contains(err.Error(), "get_price has no executor") {
		t.Fatalf("Check = %v, want missing executor", err)
	}
	if err := r.Handle("get_price", ExecutorFunc(func(context.Context, Call) (Result, error) { return Result{}, nil })); err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err != nil {
		t.Fatalf("Check = %v", err)
	}
	if _, err := r.Definitions([]string{"nope"}); !errors.Is(err, ErrUnknownTool) {
		t.Errorf("Definitions(nope) = %v", err)
	}
	if err := r.Define(Definition{Name: "get_price", Description: "again", Parameters: json.RawMessage(`{"type":"object"}`)}); !errors.Is(err, ErrInvalidDefinition) {
		t.Errorf("duplicate Define = %v", err)
	}
	if err := r.Define(Definition{Name: "bad", Description: "d", Parameters: json.RawMessage(`{"type":"string"}`)}); !errors.Is(err, ErrInvalidDefinition) {
		t.Errorf("non-object parameters accepted: %v", err)
	}
	if err := r.Define(Definition{Name: "evil", Description: "d", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`)}); err == nil {
		t.Error("a schema referencing a local file was accepted")
	}
}

func TestDescribeKeepsModelOrder(t *testing.T) {
	t.Parallel()
	tests := map[string]string{
		`{"ticker": "BHP", "report_type": "quarterly"}`: `get_financials {ticker: "BHP", report_type: "quarterly"}`,
		`{}`:                    `get_financials`,
		`{"n": 2, "l": [1, 2]}`: `get_financials {n: 2, l: [1,2]}`,
		`not json`:              `get_financials not json`,
		`{"q":"` + strings.Repeat("x", 100) + `"}`: `get_financials {q: "` + strings.Repeat("x", 58) + `…}`,
	}
	for args, want := range tests {
		if got := Describe("get_financials", []byte(args)); got != want {
			t.Errorf("Describe(%s) = %s, want %s", args, got, want)
		}
	}
}

func TestIsEmpty(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{"": true, "null": true, `""`: true, "{}": true, " [ ] ": true, `{"a":1}`: false, "0": false, `[0]`: false} {
		if got := IsEmpty(json.RawMessage(in)); got != want {
			t.Errorf("IsEmpty(%q) = %v, want %v", in, got, want)
		}
	}
}
