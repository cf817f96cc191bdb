// Package openapirules adds the request constraints declared in the protos
// (protovalidate rules) to the OpenAPI v2 document protoc-gen-openapiv2
// writes, which does not read them: so the document clients read states the
// same lengths, ranges, patterns and required fields the services enforce.
//
// It walks every operation from its RPC's request message: path and query
// parameters get the rules of the field they bind to, and the body schema
// (and every definition reachable from it) the rules of its fields. Rules
// JSON Schema cannot state (max_bytes, a prefix, an enum's not_in) are
// added to the description in words.
package openapirules

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// Apply returns spec with the rules of the request messages found in files
// added. Keys keep their order, so a regenerated document diffs cleanly.
// Applying twice gives the same document.
func Apply(spec []byte, files *protoregistry.Files) ([]byte, error) {
	doc, err := decodeDocument(spec)
	if err != nil {
		return nil, err
	}
	a := &applier{doc: doc, files: files, done: map[string]bool{}}
	if err := a.apply(); err != nil {
		return nil, err
	}
	return encodeDocument(doc)
}

type applier struct {
	doc   *object
	files *protoregistry.Files
	done  map[string]bool // definitions already given their rules
}

func (a *applier) apply() error {
	paths, _ := a.doc.get("paths").(*object)
	if paths == nil {
		return nil
	}
	for _, path := range paths.keys {
		ops, _ := paths.get(path).(*object)
		if ops == nil {
			continue
		}
		for _, method := range ops.keys {
			op, _ := ops.get(method).(*object)
			if op == nil {
				continue
			}
			id, _ := op.get("operationId").(string)
			if !strings.Contains(id, "_") {
				continue // hand-written (Merge): no RPC, its rules are its own
			}
			md := a.input(id)
			if md == nil {
				return fmt.Errorf("openapirules: %s %s: no RPC for operationId %q", method, path, id)
			}
			params, _ := op.get("parameters").([]any)
			for _, p := range params {
				param, _ := p.(*object)
				if param == nil {
					continue
				}
				switch param.get("in") {
				case "body":
					if schema, _ := param.get("schema").(*object); schema != nil {
						a.schema(schema, md)
					}
				case "path", "query":
					name, _ := param.get("name").(string)
					if fd := fieldByPath(md, name); fd != nil {
						fieldRules(param, fd, true)
					}
				}
			}
		}
	}
	return nil
}

// input finds the request message of "Service_Method" (an additional
// binding's operation is "Service_Method2", "3", ...).
func (a *applier) input(operationID string) protoreflect.MessageDescriptor {
	svc, method, ok := strings.Cut(operationID, "_")
	if !ok {
		return nil
	}
	method = strings.TrimRight(method, "0123456789")
	var found protoreflect.MessageDescriptor
	a.files.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		s := fd.Services().ByName(protoreflect.Name(svc))
		if s == nil {
			return true
		}
		if m := s.Methods().ByName(protoreflect.Name(method)); m != nil {
			found = m.Input()
			return false
		}
		return true
	})
	return found
}

// schema gives the definition schema refers to (or schema itself, when
// inline) the rules of md's fields, and recurses into message fields.
func (a *applier) schema(schema *object, md protoreflect.MessageDescriptor) {
	if ref, _ := schema.get("$ref").(string); ref != "" {
		name := strings.TrimPrefix(ref, "#/definitions/")
		if a.done[name] {
			return
		}
		a.done[name] = true
		defs, _ := a.doc.get("definitions").(*object)
		def, _ := defs.get(name).(*object)
		if def == nil {
			return
		}
		schema = def
	}
	props, _ := schema.get("properties").(*object)
	if props == nil {
		return
	}
	var required []any
	if r, ok := schema.get("required").([]any); ok {
		required = r
	}
	fields := md.Fields()
	for _, name := range props.keys {
		prop, _ := props.get(name).(*object)
		fd := fields.ByJSONName(name)
		if fd == nil {
			fd = fields.ByTextName(name)
		}
		if prop == nil || fd == nil {
			continue
		}
		if fieldRules(prop, fd, false) && !containsString(required, name) {
			required = append(required, name)
		}
		if m := fd.Message(); m != nil && !fd.IsMap() && m.ParentFile().Package() != "google.protobuf" {
			target := prop
			if fd.IsList() {
				target, _ = prop.get("items").(*object)
			}
			if target != nil {
				a.schema(target, m)
			}
		}
	}
	if len(required) > 0 {
		schema.set("required", required)
	}
}

func containsString(list []any, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// fieldByPath resolves a dotted JSON field path (scope.tenantId).
func fieldByPath(md protoreflect.MessageDescriptor, path string) protoreflect.FieldDescriptor {
	var fd protoreflect.FieldDescriptor
	for _, part := range strings.Split(path, ".") {
		if fd != nil {
			if md = fd.Message(); md == nil {
				return nil
			}
		}
		if fd = md.Fields().ByJSONName(part); fd == nil {
			if fd = md.Fields().ByTextName(part); fd == nil {
				return nil
			}
		}
	}
	return fd
}

// fieldRules writes fd's rules into target (a property schema or a
// parameter) and reports whether the field is required. A parameter takes
// required itself; a property reports it for its object's required list.
func fieldRules(target *object, fd protoreflect.FieldDescriptor, isParam bool) bool {
	rules, _ := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	if rules == nil {
		return false
	}
	var notes []string
	switch {
	case rules.GetRepeated() != nil:
		r := rules.GetRepeated()
		if r.HasMinItems() {
			target.set("minItems", r.GetMinItems())
		}
		if r.HasMaxItems() {
			target.set("maxItems", r.GetMaxItems())
		}
		if items := r.GetItems(); items != nil {
			if it, _ := target.get("items").(*object); it != nil {
				notes = append(notes, scalarRules(it, items, fd)...)
			}
		}
	case rules.GetMap() != nil:
		r := rules.GetMap()
		if r.HasMinPairs() {
			target.set("minProperties", r.GetMinPairs())
		}
		if r.HasMaxPairs() {
			target.set("maxProperties", r.GetMaxPairs())
		}
		if k := r.GetKeys().GetString(); k != nil && (k.HasMinLen() || k.HasMaxLen()) {
			notes = append(notes, fmt.Sprintf("keys are %s characters", lenRange(k.HasMinLen(), k.GetMinLen(), k.HasMaxLen(), k.GetMaxLen())))
		}
		if vals, _ := target.get("additionalProperties").(*object); vals != nil && r.GetValues() != nil {
			notes = append(notes, scalarRules(vals, r.GetValues(), fd.MapValue())...)
		}
	default:
		notes = scalarRules(target, rules, fd)
	}
	required := rules.GetRequired()
	if required && isParam {
		target.set("required", true)
	}
	if len(notes) > 0 {
		desc, _ := target.get("description").(string)
		add := "Constraints: " + strings.Join(notes, "; ") + "."
		if !strings.Contains(desc, add) {
			target.set("description", strings.TrimSpace(desc+"\n\n"+add))
		}
	}
	return required
}

// scalarRules writes string, number and enum rules of fd (or of its
// elements); it returns what JSON Schema cannot say, in words.
func scalarRules(target *object, rules *validate.FieldRules, fd protoreflect.FieldDescriptor) (notes []string) {
	if s := rules.GetString(); s != nil {
		if s.HasMinLen() {
			target.set("minLength", s.GetMinLen())
		}
		if s.HasMaxLen() {
			target.set("maxLength", s.GetMaxLen())
		}
		if s.HasPattern() {
			target.set("pattern", s.GetPattern())
		}
		if len(s.GetIn()) > 0 {
			enum := make([]any, 0, len(s.GetIn()))
			for _, v := range s.GetIn() {
				enum = append(enum, v)
			}
			target.set("enum", enum)
		}
		if s.HasMaxBytes() {
			notes = append(notes, fmt.Sprintf("at most %d bytes (UTF-8)", s.GetMaxBytes()))
		}
		if s.HasPrefix() {
			notes = append(notes, fmt.Sprintf("starts with %q", s.GetPrefix()))
		}
	}
	if b := rules.GetBytes(); b != nil && b.HasMinLen() {
		notes = append(notes, fmt.Sprintf("at least %d bytes", b.GetMinLen()))
	}
	if e := rules.GetEnum(); e != nil && fd.Enum() != nil {
		// defined_only needs no words: the schema lists the values.
		for _, n := range e.GetNotIn() {
			name := strconv.Itoa(int(n))
			if v := fd.Enum().Values().ByNumber(protoreflect.EnumNumber(n)); v != nil {
				name = string(v.Name())
			}
			notes = append(notes, "not "+name)
		}
	}
	bound := func(minSet, minExcl bool, min any, maxSet, maxExcl bool, max any) {
		if minSet {
			target.set("minimum", min)
			if minExcl {
				target.set("exclusiveMinimum", true)
			}
		}
		if maxSet {
			target.set("maximum", max)
			if maxExcl {
				target.set("exclusiveMaximum", true)
			}
		}
	}
	if n := rules.GetInt32(); n != nil {
		bound(n.HasGte() || n.HasGt(), n.HasGt(), first(n.HasGt(), n.GetGt(), n.GetGte()), n.HasLte() || n.HasLt(), n.HasLt(), first(n.HasLt(), n.GetLt(), n.GetLte()))
	}
	if n := rules.GetInt64(); n != nil {
		bound(n.HasGte() || n.HasGt(), n.HasGt(), first(n.HasGt(), n.GetGt(), n.GetGte()), n.HasLte() || n.HasLt(), n.HasLt(), first(n.HasLt(), n.GetLt(), n.GetLte()))
	}
	if n := rules.GetDouble(); n != nil {
		bound(n.HasGte() || n.HasGt(), n.HasGt(), first(n.HasGt(), n.GetGt(), n.GetGte()), n.HasLte() || n.HasLt(), n.HasLt(), first(n.HasLt(), n.GetLt(), n.GetLte()))
	}
	return notes
}

func first[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

func lenRange(hasMin bool, minLen uint64, hasMax bool, maxLen uint64) string {
	switch {
	case hasMin && hasMax:
		return fmt.Sprintf("%d to %d", minLen, maxLen)
	case hasMax:
		return fmt.Sprintf("at most %d", maxLen)
	}
	return fmt.Sprintf("at least %d", minLen)
}

// object is a JSON object that keeps its keys' order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.vals[k]
}

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// MarshalJSON writes the keys in order.
func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered reads one JSON value, objects as *object, numbers as
// json.Number (written back as read).
func decodeOrdered(d *json.Decoder) (any, error) {
	d.UseNumber()
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	return decodeValue(d, tok)
}

func decodeValue(d *json.Decoder, tok json.Token) (any, error) {
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				vt, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(d, vt)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := d.Token() // '}'
			return o, err
		case '[':
			list := []any{}
			for d.More() {
				vt, err := d.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(d, vt)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := d.Token() // ']'
			return list, err
		}
	case nil, bool, string, json.Number:
		return t, nil
	}
	return nil, io.ErrUnexpectedEOF
}

// Merge returns spec with the paths and definitions of each fragment (an
// OpenAPI v2 document holding only those) added after the generated ones:
// the hand-written description of a route the gateway serves without an
// RPC of its own. A fragment may not replace what the protos generate: an
// operation (path and method) or a definition spec already has is an
// error. Keys keep their order; merging into a document that already holds
// a fragment's entries, identical, leaves it as it is.
func Merge(spec []byte, fragments ...[]byte) ([]byte, error) {
	doc, err := decodeDocument(spec)
	if err != nil {
		return nil, err
	}
	for i, f := range fragments {
		frag, err := decodeDocument(f)
		if err != nil {
			return nil, fmt.Errorf("fragment %d: %w", i, err)
		}
		for _, k := range frag.keys {
			if k != "paths" && k != "definitions" {
				return nil, fmt.Errorf("openapirules: fragment %d: %q: a fragment holds only paths and definitions", i, k)
			}
		}
		if err := mergeEntries(doc, frag, "paths", i); err != nil {
			return nil, err
		}
		if err := mergeEntries(doc, frag, "definitions", i); err != nil {
			return nil, err
		}
	}
	return encodeDocument(doc)
}

// mergeEntries adds frag's section (paths or definitions) to doc's:
// per path, its operations; per definition, the whole schema.
func mergeEntries(doc, frag *object, section string, i int) error {
	add, _ := frag.get(section).(*object)
	if add == nil {
		return nil
	}
	into, _ := doc.get(section).(*object)
	if into == nil {
		into = &object{vals: map[string]any{}}
		doc.set(section, into)
	}
	for _, k := range add.keys {
		cur := into.get(k)
		if cur == nil {
			into.set(k, add.get(k))
			continue
		}
		if section == "definitions" {
			if !sameJSON(cur, add.get(k)) {
				return fmt.Errorf("openapirules: fragment %d: definition %q is generated already", i, k)
			}
			continue
		}
		ops, _ := cur.(*object)
		newOps, _ := add.get(k).(*object)
		if ops == nil || newOps == nil {
			return fmt.Errorf("openapirules: fragment %d: path %q is not an object", i, k)
		}
		for _, m := range newOps.keys {
			if have := ops.get(m); have != nil {
				if !sameJSON(have, newOps.get(m)) {
					return fmt.Errorf("openapirules: fragment %d: %s %s is generated already", i, strings.ToUpper(m), k)
				}
				continue
			}
			ops.set(m, newOps.get(m))
		}
	}
	return nil
}

// sameJSON reports whether a and b encode alike.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// decodeDocument reads a JSON object keeping its keys' order.
func decodeDocument(spec []byte) (*object, error) {
	v, err := decodeOrdered(json.NewDecoder(bytes.NewReader(spec)))
	if err != nil {
		return nil, fmt.Errorf("openapirules: %w", err)
	}
	doc, ok := v.(*object)
	if !ok {
		return nil, fmt.Errorf("openapirules: the document is not a JSON object")
	}
	return doc, nil
}

// encodeDocument writes doc as the generator does: indented by two spaces.
func encodeDocument(doc *object) ([]byte, error) {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("openapirules: %w", err)
	}
	return out.Bytes(), nil
}
