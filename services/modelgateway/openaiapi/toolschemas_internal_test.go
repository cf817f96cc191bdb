package openaiapi

import (
	"errors"
	"strconv"
	"testing"
)

// A tool schema that compiled is not compiled again when a request sends
// it again; one that failed is, and fails again; the cache stays bounded.
func TestToolSchemasCompileOnce(t *testing.T) {
	t.Parallel()
	compiled := map[string]int{}
	c := &schemaCache{compile: func(_ string, schema []byte) error {
		compiled[string(schema)]++
		if string(schema) == `{"type":"bogus"}` {
			return errors.New("bad type")
		}
		return nil
	}}
	good, bad := []byte(`{"type":"object"}`), []byte(`{"type":"bogus"}`)
	for range 3 {
		if err := c.check("f", good); err != nil {
			t.Fatal(err)
		}
		if err := c.check("g", bad); err == nil {
			t.Fatal("a schema that does not compile was accepted")
		}
	}
	if compiled[string(good)] != 1 || compiled[string(bad)] != 3 {
		t.Errorf("compiled the good schema %d times and the bad one %d times; want 1 and 3", compiled[string(good)], compiled[string(bad)])
	}
	for i := range maxKnownSchemas + 10 {
		if err := c.check("f", []byte(`{"type":"object","title":"`+string(rune('a'+i%26))+`","description":"`+strconv.Itoa(i)+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.known); n > maxKnownSchemas {
		t.Errorf("the cache holds %d schemas, more than %d", n, maxKnownSchemas)
	}
}
