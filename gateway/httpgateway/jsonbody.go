package httpgateway

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// bodyDecoder decodes a request body (already read whole by readBody) into
// the RPC's request message with protojson, and turns protojson's errors,
// which give only a line and column, into errors that name the field:
// "scope: want a JSON object (agentmesh.common.v1.Scope), got a string
// (request body, line 1, column 10)". An empty body (io.EOF) stays as it
// is: handlers allow it.
type bodyDecoder struct {
	r    io.Reader
	opts protojson.UnmarshalOptions
	// fallback decodes what is not a proto message.
	fallback func(any) error
}

func (d bodyDecoder) Decode(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return d.fallback(v)
	}
	body, err := io.ReadAll(d.r)
	if err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return io.EOF
	}
	if off, deep := tooDeep(body, maxBodyDepth); deep {
		path, _ := jsonPathAt(body, off)
		shown := displayPath(path[:min(len(path), 4)])
		if len(path) > 4 {
			shown += "…"
		}
		line, col := lineCol(body, off)
		return fmt.Errorf("%s: nested deeper than %d levels (request body, line %d, column %d)", shown, maxBodyDepth, line, col)
	}
	if err := d.opts.Unmarshal(body, m); err != nil {
		return describeBodyError(body, m.ProtoReflect().Descriptor(), err)
	}
	return nil
}

// maxBodyDepth bounds how deeply a request body's objects and arrays nest.
// protojson counts only messages, not the Struct, ListValue and Value of a
// free-form field, so a value nested thousands deep passed it and then
// failed the service's own decoding (protobuf's binary limit of 10,000
// nested messages, two for each level of such a value) as an internal
// error.
const maxBodyDepth = 512

// tooDeep returns the offset of the first '{' or '[' of body that opens a
// level past max, outside strings.
func tooDeep(body []byte, max int) (int, bool) {
	depth := 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '"':
			_, n := readJSONString(body[i:])
			i += n - 1
		case '{', '[':
			if depth++; depth > max {
				return i, true
			}
		case '}', ']':
			depth--
		}
	}
	return 0, false
}

// protojsonPos finds the position protojson's errors carry: "(line 1:10)".
var protojsonPos = regexp.MustCompile(`\(line (\d+):(\d+)\): ?`)

// describeBodyError rewrites a protojson error on body as "<field path>:
// <what is wrong> (request body, line L, column C)".
func describeBodyError(body []byte, md protoreflect.MessageDescriptor, err error) error {
	if off, esc, ok := utf8x.LoneSurrogate(body); ok {
		// protojson refuses it, with "unexpected EOF" or a misleading
		// "invalid escape code" and no position when it ends a string.
		path, _ := jsonPathAt(body, off)
		line, col := lineCol(body, off)
		return fmt.Errorf("%s: %s is half of a UTF-16 surrogate pair without its other half; "+
			"write the character itself, or both halves (request body, line %d, column %d)", displayPath(path), esc, line, col)
	}
	msg := err.Error()
	loc := protojsonPos.FindStringSubmatchIndex(msg)
	if loc == nil {
		return fmt.Errorf("request body: %s", strings.TrimPrefix(strings.ReplaceAll(msg, "\u00a0", " "), "proto: "))
	}
	line, _ := strconv.Atoi(msg[loc[2]:loc[3]])
	col, _ := strconv.Atoi(msg[loc[4]:loc[5]])
	detail := msg[loc[1]:]
	off := offsetOf(body, line, col)
	path, key := jsonPathAt(body, off)
	where := fmt.Sprintf("(request body, line %d, column %d)", line, col)
	if key {
		// protojson stopped at an object key: it names no field of that
		// message (or repeats one).
		return fmt.Errorf("%s: %s %s", displayPath(path), detail, where)
	}
	// protojson reports a value of the wrong kind as a syntax error
	// ("unexpected token"): check the kind first.
	got := jsonKindAt(body, off)
	if want, name := expectedKind(md, path); want != "" && got != "" && !kindFits(want, got) {
		if name != "" {
			want += " (" + name + ")"
		}
		return fmt.Errorf("%s: want %s, got %s %s", displayPath(path), want, got, where)
	}
	if strings.Contains(msg[:loc[0]], "syntax error") && !strings.Contains(detail, "UTF-8") {
		return fmt.Errorf("%s: not valid JSON: %s %s", displayPath(path), detail, where)
	}
	return fmt.Errorf("%s: %s %s", displayPath(path), detail, where)
}

func displayPath(path []string) string {
	if len(path) == 0 {
		return "request body"
	}
	var b strings.Builder
	for i, p := range path {
		if strings.HasPrefix(p, "[") {
			b.WriteString(p)
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(p)
	}
	return b.String()
}

// lineCol is offsetOf's inverse: the 1-based line and column (in runes) of
// byte offset off of body.
func lineCol(body []byte, off int) (line, col int) {
	line, col = 1, 1
	for i := 0; i < off && i < len(body); {
		if body[i] == '\n' {
			line, col = line+1, 1
			i++
			continue
		}
		_, size := utf8.DecodeRune(body[i:])
		i += size
		col++
	}
	return line, col
}

// offsetOf turns protojson's 1-based line and column (counted in runes,
// each invalid byte one rune) into a byte offset of body.
func offsetOf(body []byte, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(body[off:], '\n')
		if i < 0 {
			return len(body)
		}
		off += i + 1
	}
	for c := 1; c < col && off < len(body); c++ {
		_, size := utf8.DecodeRune(body[off:])
		off += size
	}
	return off
}

// jsonPathAt scans body up to byte offset off and returns the path of the
// value (or object key, then key is true) found there: object keys as
// written, array elements as "[i]". It tolerates invalid JSON: it only
// needs to be right up to off.
func jsonPathAt(body []byte, off int) (path []string, key bool) {
	type frame struct {
		object    bool
		expectKey bool
		name      string // the current key (objects) or "[i]" (arrays)
		index     int
	}
	var stack []*frame
	current := func() []string {
		out := make([]string, 0, len(stack))
		for _, f := range stack {
			if f.name != "" {
				out = append(out, f.name)
			}
		}
		return out
	}
	i := 0
	for i < len(body) {
		c := body[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			i++
			continue
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if i >= off {
			if top != nil && top.object && top.expectKey && c == '"' {
				k, _ := readJSONString(body[i:])
				return append(current(), k), true
			}
			return current(), false
		}
		switch c {
		case '{':
			stack = append(stack, &frame{object: true, expectKey: true})
			i++
		case '[':
			stack = append(stack, &frame{name: "[0]"})
			i++
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			i++
		case ',':
			if top != nil {
				if top.object {
					top.expectKey, top.name = true, ""
				} else {
					top.index++
					top.name = "[" + strconv.Itoa(top.index) + "]"
				}
			}
			i++
		case ':':
			i++
		case '"':
			s, n := readJSONString(body[i:])
			if top != nil && top.object && top.expectKey {
				top.name, top.expectKey = s, false
			}
			i += n
		default:
			j := i
			for j < len(body) && !bytes.ContainsRune([]byte(" \t\r\n,:]}[{\""), rune(body[j])) {
				j++
			}
			i = max(j, i+1)
		}
	}
	return current(), false
}

// readJSONString reads the string literal at the start of b and returns
// its text (escapes kept as written, enough to name a key) and its length
// in bytes.
func readJSONString(b []byte) (string, int) {
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return string(b[1:i]), i + 1
		}
	}
	return string(b[1:]), len(b)
}

// jsonKindAt names the kind of the JSON value starting at off.
func jsonKindAt(body []byte, off int) string {
	for off < len(body) && bytes.IndexByte([]byte(" \t\r\n"), body[off]) >= 0 {
		off++
	}
	if off >= len(body) {
		return ""
	}
	switch c := body[off]; {
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == '"':
		return "a string"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == 'n':
		return "null"
	case c == '-' || '0' <= c && c <= '9':
		return "a number"
	}
	return ""
}

// Expected kinds; kindFits knows which JSON kinds each accepts.
const (
	wantObject  = "a JSON object"
	wantArray   = "a JSON array"
	wantString  = "a string"
	wantBase64  = "a base64 string"
	wantBool    = "true or false"
	wantInteger = "an integer (a number or a string of digits)"
	wantNumber  = "a number"
	wantEnum    = "an enum value name (or its number)"
	wantTime    = "an RFC 3339 timestamp string, e.g. \"2026-01-02T15:04:05Z\""
	wantDur     = "a duration string, e.g. \"1.5s\""
	wantAny     = "any JSON value"
)

func kindFits(want, got string) bool {
	if got == "null" {
		return true // protojson treats null as unset for most fields
	}
	switch want {
	case wantObject:
		return got == "an object"
	case wantArray:
		return got == "an array"
	case wantString, wantBase64, wantTime, wantDur:
		return got == "a string"
	case wantBool:
		return got == "a boolean"
	case wantInteger, wantNumber, wantEnum:
		return got == "a number" || got == "a string"
	}
	return true
}

// expectedKind resolves path (keys as written, "[i]" for elements) against
// md and says what JSON the value there must be, with the message or enum
// name where one helps; "" when the path does not resolve.
func expectedKind(md protoreflect.MessageDescriptor, path []string) (want, name string) {
	if len(path) == 0 {
		return wantObject, string(md.FullName())
	}
	var fd protoreflect.FieldDescriptor
	inList, inMap := false, false // fd is a list/map and path stands on the whole of it
	for _, p := range path {
		switch {
		case strings.HasPrefix(p, "["):
			if fd == nil || !inList {
				return "", ""
			}
			inList = false
		case fd != nil && inMap:
			inMap = false
			fd = fd.MapValue()
		default:
			if fd != nil {
				md = fd.Message()
			}
			if md == nil || isWellKnownDynamic(md) {
				return "", ""
			}
			fields := md.Fields()
			fd = fields.ByJSONName(p)
			if fd == nil {
				fd = fields.ByTextName(p)
			}
			if fd == nil {
				return "", ""
			}
			inList, inMap = fd.IsList(), fd.IsMap()
		}
	}
	switch {
	case inList:
		return wantArray, ""
	case inMap:
		return wantObject, ""
	}
	return kindOf(fd)
}

func isWellKnownDynamic(md protoreflect.MessageDescriptor) bool {
	switch md.FullName() {
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any":
		return true
	}
	return false
}

func kindOf(fd protoreflect.FieldDescriptor) (string, string) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		m := fd.Message()
		switch m.FullName() {
		case "google.protobuf.Timestamp":
			return wantTime, ""
		case "google.protobuf.Duration":
			return wantDur, ""
		case "google.protobuf.Value":
			return wantAny, ""
		case "google.protobuf.ListValue":
			return wantArray, ""
		case "google.protobuf.FieldMask":
			return wantString, ""
		case "google.protobuf.StringValue":
			return wantString, ""
		case "google.protobuf.BoolValue":
			return wantBool, ""
		case "google.protobuf.BytesValue":
			return wantBase64, ""
		case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
			return wantNumber, ""
		case "google.protobuf.Int32Value", "google.protobuf.Int64Value", "google.protobuf.UInt32Value", "google.protobuf.UInt64Value":
			return wantInteger, ""
		}
		return wantObject, string(m.FullName())
	case protoreflect.StringKind:
		return wantString, ""
	case protoreflect.BytesKind:
		return wantBase64, ""
	case protoreflect.BoolKind:
		return wantBool, ""
	case protoreflect.EnumKind:
		return wantEnum, string(fd.Enum().FullName())
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return wantNumber, ""
	}
	return wantInteger, ""
}
