package testkit

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/agentmesh/agentmesh/libs/jsonstr"
)

// encodeSJSON writes doc as FerretDB v1's SQLite backend stores a document
// (its package sjson: the values as JSON, led by a "$s" schema of their
// BSON types), byte for byte as FerretDB's own insert would write it. It
// reports false for what FerretDB would change or refuse on the way in
// (a first field other than _id, an _id other than a string or an
// ObjectID, keys it rejects or that need escaping at the top level,
// nested arrays, a nested document whose _id is not its first field,
// -0, NaN and infinite doubles) and for the types our stores never write
// (regular expressions, timestamps, decimals and the deprecated ones):
// those go through FerretDB.
func encodeSJSON(doc bson.Raw) ([]byte, bool) {
	elems, err := doc.Elements()
	if err != nil || len(elems) == 0 {
		return nil, false
	}
	keys := keysOf(elems)
	if keys[0] != "_id" || !validKeys(keys, false) {
		return nil, false
	}
	switch elems[0].Value().Type {
	case bson.TypeString, bson.TypeObjectID:
	default:
		return nil, false
	}
	var b bytes.Buffer
	// The schema and the values together take about twice the BSON's
	// bytes: growing the buffer from nothing copied each document several
	// times (a tenth of what a loaded mesh allocated).
	b.Grow(2*len(doc) + 64)
	b.WriteString(`{"$s":`)
	if !writeSchema(&b, elems, keys) {
		return nil, false
	}
	for i, e := range elems {
		k := keys[i]
		// FerretDB writes top-level keys between quotes as they are.
		if !jsonstr.Plain(k, true) {
			return nil, false
		}
		b.WriteString(`,"`)
		b.WriteString(k)
		b.WriteString(`":`)
		if !writeValue(&b, e.Value(), false) {
			return nil, false
		}
	}
	b.WriteByte('}')
	return b.Bytes(), true
}

// keysOf returns the keys of elems, as strings over the document's own
// bytes, which do not change while the document is encoded: Key copied
// each one, and the encoder asked for each several times (a third of its
// cost, in a loaded mesh's profile).
func keysOf(elems []bson.RawElement) []string {
	keys := make([]string, len(elems))
	for i, e := range elems {
		k := bsoncore.Element(e).KeyBytes()
		keys[i] = unsafe.String(unsafe.SliceData(k), len(k))
	}
	return keys
}

// validKeys reports whether FerretDB takes a document's keys unchanged:
// valid UTF-8, no leading '$', no '.', no key twice, and, in a nested
// document, an _id only as the first field (FerretDB moves it there).
func validKeys(keys []string, nested bool) bool {
	var seen map[string]bool // for documents of many keys; fewer are compared
	if len(keys) > smallDocument {
		seen = make(map[string]bool, len(keys))
	}
	for i, k := range keys {
		if !utf8.ValidString(k) || strings.HasPrefix(k, "$") || strings.Contains(k, ".") {
			return false
		}
		if nested && k == "_id" && i > 0 {
			return false
		}
		if seen != nil {
			if seen[k] {
				return false
			}
			seen[k] = true
			continue
		}
		if slices.Contains(keys[:i], k) {
			return false
		}
	}
	return true
}

// smallDocument is the most keys validKeys compares pairwise.
const smallDocument = 32

// writeSchema writes the schema of a document of elems (whose keys are
// keys): {} when empty, else {"p":{key:type,...},"$k":[keys]}.
func writeSchema(b *bytes.Buffer, elems []bson.RawElement, keys []string) bool {
	if len(elems) == 0 {
		b.WriteString(`{}`)
		return true
	}
	b.WriteString(`{"p":{`)
	for i, e := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, keys[i])
		b.WriteByte(':')
		if !writeType(b, e.Value()) {
			return false
		}
	}
	b.WriteString(`},"$k":[`)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(b, k)
	}
	b.WriteString(`]}`)
	return true
}

// writeType writes the schema entry of v.
func writeType(b *bytes.Buffer, v bson.RawValue) bool {
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil {
			return false
		}
		b.WriteString(`{"t":"object","$s":`)
		if !writeSchema(b, elems, keysOf(elems)) {
			return false
		}
		b.WriteByte('}')
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			return false
		}
		b.WriteString(`{"t":"array","i":[`)
		for i, item := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeType(b, item) {
				return false
			}
		}
		b.WriteString(`]}`)
	case bson.TypeBinary:
		subtype, _, ok := v.BinaryOK()
		if !ok || subtype == bson.TypeBinaryBinaryOld {
			return false
		}
		b.WriteString(`{"t":"binData","s":`)
		b.Write(strconv.AppendUint(b.AvailableBuffer(), uint64(subtype), 10))
		b.WriteByte('}')
	default:
		t, ok := scalarTypes[v.Type]
		if !ok {
			return false
		}
		b.WriteString(`{"t":"` + t + `"}`)
	}
	return true
}

// scalarTypes are FerretDB's names of the scalar BSON types it stores
// that our stores write.
var scalarTypes = map[bson.Type]string{
	bson.TypeDouble:   "double",
	bson.TypeString:   "string",
	bson.TypeObjectID: "objectId",
	bson.TypeBoolean:  "bool",
	bson.TypeDateTime: "date",
	bson.TypeNull:     "null",
	bson.TypeInt32:    "int",
	bson.TypeInt64:    "long",
}

// writeValue writes v as FerretDB's sjson does; inArray says whether v is
// an item of an array (which may not be an array itself).
func writeValue(b *bytes.Buffer, v bson.RawValue, inArray bool) bool {
	var x any
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		elems, err := v.Document().Elements()
		if err != nil {
			return false
		}
		keys := keysOf(elems)
		if !validKeys(keys, true) {
			return false
		}
		b.WriteByte('{')
		for i, e := range elems {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, keys[i])
			b.WriteByte(':')
			if !writeValue(b, e.Value(), false) {
				return false
			}
		}
		b.WriteByte('}')
		return true
	case bson.TypeArray:
		if inArray {
			return false // FerretDB refuses nested arrays
		}
		vals, err := v.Array().Values()
		if err != nil {
			return false
		}
		b.WriteByte('[')
		for i, item := range vals {
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeValue(b, item, true) {
				return false
			}
		}
		b.WriteByte(']')
		return true
	case bson.TypeDouble:
		f := v.Double()
		if math.IsNaN(f) || math.IsInf(f, 0) || (f == 0 && math.Signbit(f)) {
			return false // refused, or made +0, by FerretDB
		}
		x = f
	case bson.TypeString:
		s := v.StringValue()
		if !utf8.ValidString(s) {
			return false
		}
		writeString(b, s)
		return true
	case bson.TypeBinary:
		_, data := v.Binary()
		b.WriteByte('"')
		b.Write(base64.StdEncoding.AppendEncode(b.AvailableBuffer(), data))
		b.WriteByte('"')
		return true
	case bson.TypeObjectID:
		id := v.ObjectID()
		b.WriteByte('"')
		b.Write(hex.AppendEncode(b.AvailableBuffer(), id[:]))
		b.WriteByte('"')
		return true
	case bson.TypeBoolean:
		b.Write(strconv.AppendBool(b.AvailableBuffer(), v.Boolean()))
		return true
	case bson.TypeDateTime:
		b.Write(strconv.AppendInt(b.AvailableBuffer(), v.DateTime(), 10))
		return true
	case bson.TypeNull:
		b.WriteString("null")
		return true
	case bson.TypeInt32:
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(v.Int32()), 10))
		return true
	case bson.TypeInt64:
		b.Write(strconv.AppendInt(b.AvailableBuffer(), v.Int64(), 10))
		return true
	default:
		return false
	}
	j, err := json.Marshal(x)
	if err != nil {
		return false
	}
	b.Write(j)
	return true
}

// writeString writes s as a JSON string exactly as encoding/json (which
// FerretDB's sjson uses) does, HTML characters, U+2028 and U+2029
// escaped.
func writeString(b *bytes.Buffer, s string) {
	b.Write(jsonstr.Append(b.AvailableBuffer(), s, true))
}
