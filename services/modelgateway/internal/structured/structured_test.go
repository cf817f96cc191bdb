package structured_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/structured"
)

const schema = `{"type":"object","required":["items"],"properties":{"items":{"type":"array","items":{"type":"object","required":["sku","qty"],"properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}$"},"qty":{"type":"integer","minimum":1}}}}}}`

func TestValidateNamesEveryViolation(t *testing.T) {
	t.Parallel()
	s, err := structured.Compile("order", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(`{"items":[{"sku":"ABC","qty":2}]}`); err != nil {
		t.Errorf("valid answer rejected: %v", err)
	}
	err = s.Validate(`{"items":[{"sku":"abc","qty":0},{"qty":1}]}`)
	var ve *structured.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"/items/0/sku", "/items/0/qty", "/items/1", "sku"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q does not name %s", msg, want)
		}
	}
	if err := s.Validate("Sure! Here it is"); !errors.As(err, &ve) || ve.NotJSON == "" {
		t.Errorf("prose accepted: %v", err)
	}
	if err := s.Validate("```json\n{\"items\":[]}\n```"); err != nil {
		t.Errorf("fenced JSON rejected: %v", err)
	}
}

// TestValidationMessagesAreBounded: an answer breaking a schema in many
// places is described by its first 20 violations and a count of the
// rest, each at most 1 KiB (an answer to a schema of 10,000 properties
// made a message of 618 KB); every violation stays in Violations.
func TestValidationMessagesAreBounded(t *testing.T) {
	t.Parallel()
	var props, answer []string
	for i := range 500 {
		props = append(props, fmt.Sprintf(`"p%03d":{"type":"integer"}`, i))
		answer = append(answer, fmt.Sprintf(`"p%03d":%q`, i, strings.Repeat("x", 5000)))
	}
	s, err := structured.Compile("wide", []byte(`{"type":"object","properties":{`+strings.Join(props, ",")+`}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Validate(`{` + strings.Join(answer, ",") + `}`)
	var ve *structured.ValidationError
	if !errors.As(err, &ve) || len(ve.Violations) != 500 {
		t.Fatalf("%d violations (%v), want 500", len(ve.Violations), err)
	}
	msg := err.Error()
	if !strings.HasSuffix(msg, "; and 480 more") || !strings.Contains(msg, "at /p000: ") || strings.Contains(msg, "/p020") || len(msg) > 21<<10 {
		t.Errorf("message of %d bytes ending %q; want the first 20 violations and the count of the rest", len(msg), msg[max(0, len(msg)-80):])
	}
}

func TestCompileRejectsBadSchemas(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{`{`, `[1]`, `{"type":"nonsense"}`} {
		if _, err := structured.Compile("x", []byte(bad)); err == nil {
			t.Errorf("schema %s accepted", bad)
		}
	}
}

func TestPromptsSayJSONAndCarryTheSchema(t *testing.T) {
	t.Parallel()
	f := llm.ResponseFormat{Type: llm.FormatJSONSchema, Schema: []byte(schema), Name: "order"}
	in := structured.Instruction(f)
	if !strings.Contains(strings.ToLower(in), "json") || !strings.Contains(in, `"sku"`) || !strings.Contains(in, "order") {
		t.Errorf("instruction %q", in)
	}
	rp := structured.RepairPrompt(f, errors.New("at /items: missing sku"))
	if !strings.Contains(rp, "at /items: missing sku") || !strings.Contains(rp, `"qty"`) {
		t.Errorf("repair prompt %q", rp)
	}
	if structured.ValidateObject(`[1,2]`) == nil || structured.ValidateObject(`{"a":1}`) != nil {
		t.Error("ValidateObject")
	}
}

// A caller's schema cannot make the server read anything: references and
// metaschemas outside the schema itself are refused (the standard drafts'
// metaschemas are built in), whatever the scheme.
func TestCompileReadsNothingOutsideTheSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.json")
	if err := os.WriteFile(secret, []byte(`{"type":"string","description":"TOPSECRET"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		`{"$ref":"file://` + secret + `"}`,
		`{"type":"object","properties":{"a":{"$ref":"file://` + secret + `"}}}`,
		`{"$schema":"file://` + secret + `","type":"object"}`,
		`{"$ref":"file:///dev/stdin"}`,
		`{"$ref":"http://127.0.0.1:1/x.json"}`,
		`{"$ref":"secret.json"}`,
	} {
		_, err := structured.Compile("x", []byte(bad))
		if err == nil {
			t.Errorf("schema %s compiled", bad)
			continue
		}
		if strings.Contains(err.Error(), "TOPSECRET") {
			t.Errorf("schema %s: the error quotes the file: %v", bad, err)
		}
	}
	for _, good := range []string{
		`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object"}`,
		`{"$defs":{"a":{"type":"string"}},"type":"object","properties":{"x":{"$ref":"#/$defs/a"}}}`,
	} {
		if _, err := structured.Compile("x", []byte(good)); err != nil {
			t.Errorf("schema %s refused: %v", good, err)
		}
	}
}

// TestCompileKeepsWhatItCompiled: the same schema under the same name is
// compiled once and shared; another name or text is another schema; a
// schema that does not compile is refused every time; the cache stays
// within its bound however many schemas pass.
func TestCompileKeepsWhatItCompiled(t *testing.T) {
	t.Parallel()
	a, err := structured.Compile("order", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	b, err := structured.Compile("order", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same schema under the same name was compiled again")
	}
	other, err := structured.Compile("invoice", []byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if other == a || other.Name() != "invoice" || a.Name() != "order" {
		t.Errorf("names: %q and %q, shared %v", a.Name(), other.Name(), other == a)
	}
	// A default name and the text spelled differently are other keys,
	// and each one validates by its own text.
	loose, err := structured.Compile("", []byte(`{"type":"object"}`))
	if err != nil || loose.Name() != "response" {
		t.Fatalf("default name: %v, %v", loose, err)
	}
	if err := loose.Validate(`{"anything":1}`); err != nil {
		t.Errorf("the loose schema refused an object: %v", err)
	}
	if err := a.Validate(`{"anything":1}`); err == nil {
		t.Error("the order schema took an object without items")
	}
	for range 2 {
		if _, err := structured.Compile("bad", []byte(`{"type":"nonsense"}`)); err == nil {
			t.Error("a schema that does not compile was accepted")
		}
	}
	// Distinct schemas past the bound: the cache drops the least
	// recently used. A schema longer than the cache keeps, and one only
	// checked, compile without taking a place.
	_, bound, maxText := structured.CompiledCacheLen()
	for i := range bound + 8 {
		if _, err := structured.Compile("many", fmt.Appendf(nil, `{"type":"object","description":"%d"}`, i)); err != nil {
			t.Fatal(err)
		}
		if n, bound, _ := structured.CompiledCacheLen(); n > bound {
			t.Fatalf("the compile cache holds %d schemas, bound %d", n, bound)
		}
	}
	before, _, _ := structured.CompiledCacheLen()
	long := fmt.Appendf(nil, `{"type":"object","description":"%s"}`, strings.Repeat("x", maxText))
	l1, err := structured.Compile("long", long)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := structured.Compile("long", long)
	if err != nil || l1 == l2 {
		t.Errorf("a schema longer than the cache keeps was kept: %v, shared %v", err, l1 == l2)
	}
	checked := []byte(`{"type":"object","title":"checked only"}`)
	if err := structured.Check("tool", checked); err != nil {
		t.Fatal(err)
	}
	if structured.CompiledCacheHas("tool", checked) || structured.CompiledCacheHas("long", long) {
		t.Error("the compile cache keeps a schema only checked, or one longer than it keeps")
	}
	if err := structured.Check("tool", []byte(`{"type":"nonsense"}`)); err == nil {
		t.Error("Check accepted a schema that does not compile")
	}
	if after, _, _ := structured.CompiledCacheLen(); after != before {
		t.Errorf("the compile cache went from %d to %d schemas for a long schema and checks", before, after)
	}
}
