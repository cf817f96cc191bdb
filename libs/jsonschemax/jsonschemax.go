// Package jsonschemax compiles callers' schemas with
// github.com/santhosh-tekuri/jsonschema/v6 without loading anything, and
// renders the library's errors for the callers who wrote the schema or the
// value: one line each, without the library's internal resource names
// ("mem://…"), its metaschema's URL or its loader's Go vocabulary.
package jsonschemax

import (
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// printer renders the library's messages; safe for concurrent use.
var printer = message.NewPrinter(language.English)

const insideOnly = "a schema may refer only inside itself (#/$defs/…) or to a standard draft's metaschema"

// NewCompiler returns a compiler that loads nothing: a caller's schema may
// refer only inside itself or to a standard draft's metaschema (built in),
// so it cannot make a service read its files (or block on a FIFO) or reach
// the network.
func NewCompiler() *jsonschema.Compiler {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no scheme has a loader
	return c
}

// MaxSchemaValues bounds the JSON values (objects, arrays, strings,
// numbers, ...) of a schema Compile takes. The library's compile time
// grows with the square of a schema's parts (its queue of subschemas is
// searched linearly): 20,000 properties took 1.3 s of CPU, 60,000 took 32
// s, and the work goes on after the caller has gone. At this bound a
// schema of 6,142 properties compiles in about 0.2 s; OpenAI's own
// structured outputs take at most 5,000 properties.
const MaxSchemaValues = 12 << 10

// Compile adds doc (as jsonschema.UnmarshalJSON decodes it) to c under url
// and compiles it. Its error says what is wrong as compileError does, in
// the caller's terms.
func Compile(c *jsonschema.Compiler, url string, doc any) (*jsonschema.Schema, error) {
	// The library checks a schema against its draft's metaschema, which
	// turns the schema's numbers into exact fractions: it panicked on
	// {"multipleOf": 1e-9999999}.
	n, err := measure(doc)
	if err != nil {
		return nil, fmt.Errorf("not a valid JSON schema: %w", err)
	}
	if n > MaxSchemaValues {
		return nil, fmt.Errorf("the schema holds %d JSON values; at most %d are taken", n, MaxSchemaValues)
	}
	if err := c.AddResource(url, doc); err != nil {
		return nil, errors.New(describe(url, err))
	}
	s, err := c.Compile(url)
	if err != nil {
		return nil, errors.New(describe(url, err))
	}
	if err := checkShape(s); err != nil {
		return nil, errors.New(relative(url, err.Error()))
	}
	return s, nil
}

// describe describes err, from compiling a caller's schema:
//   - a schema that breaks its draft's rules: "not a valid JSON schema:
//     at /properties/x/type: value must be one of ..." (every problem);
//   - a $ref or $schema the compiler may not follow (the services load
//     nothing from files or the network): ""http://…" is outside the
//     schema: a schema may refer only inside itself (#/$defs/…) or to a
//     standard draft's metaschema";
//   - anything else as the library says it.
//
// base is the URL the schema was added to the compiler under: it and its
// directory are left out of the description, so references read as the
// caller wrote them ("#/$defs/missing", "other.json").
func describe(base string, err error) string {
	return relative(base, compileError(err))
}

// relative removes base, and the directory it names the schema in, from
// msg.
func relative(base, msg string) string {
	dir := base[:strings.LastIndex(base, "/")+1]
	return strings.NewReplacer(base+"/", "", base, "", dir, "").Replace(msg)
}

func compileError(err error) string {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return "not a valid JSON schema: " + strings.Join(Leaves(ve), "; ")
		}
		return "not a valid JSON schema: " + sve.Err.Error()
	}
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return fmt.Sprintf("%q is outside the schema: %s", le.URL, insideOnly)
	}
	var ue *jsonschema.UnsupportedURLSchemeError
	if errors.As(err, &ue) {
		return "a reference is outside the schema: " + insideOnly
	}
	return err.Error()
}

// Leaves renders each innermost cause of ve as "at <JSON pointer of the
// value>: <what is wrong>", in the library's order.
func Leaves(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(*jsonschema.ValidationError)
	walk = func(ve *jsonschema.ValidationError) {
		if len(ve.Causes) == 0 {
			out = append(out, fmt.Sprintf("at /%s: %s", strings.Join(ve.InstanceLocation, "/"), ve.ErrorKind.LocalizedString(printer)))
			return
		}
		for _, c := range ve.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}
