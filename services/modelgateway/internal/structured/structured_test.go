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
	// Large distinct schemas: the cache drops the least recently used.
	_, bound := structured.CompiledCacheCost()
	pad := strings.Repeat("x", 64<<10)
	for i := range bound/(64<<10) + 8 {
		text := fmt.Sprintf(`{"type":"object","description":"%s %d"}`, pad, i)
		if _, err := structured.Compile("big", []byte(text)); err != nil {
			t.Fatal(err)
		}
		if cost, bound := structured.CompiledCacheCost(); cost > bound {
			t.Fatalf("the compile cache holds %d bytes of schema text, bound %d", cost, bound)
		}
	}
}
