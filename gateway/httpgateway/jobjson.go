package httpgateway

import (
	"math"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// appendJobEventJSON appends ev's JSON as jsonOptions renders it
// (lowerCamelCase names, unset fields left out, fields in declaration
// order, a Struct's keys sorted), without protojson's reflection: a job
// event is what an analysis's watchers are sent most (15 for an analysis
// of 2 tools), and protojson's reflection over the job and its Structs cost
// the mesh more than the rest of the event's way from the stream to the
// client. Only the insignificant spaces differ (protojson adds some at
// random). It reports false for what protojson would render otherwise or
// refuse (an enum value without a name, a timestamp out of range, a number
// that is not finite, text that is not UTF-8, a Value of no kind, a nil
// element): the caller then asks protojson, errors included.
// TestJobEventJSONIsProtojsons holds it to protojson's output for every
// field of the messages, so a field added to them fails it until added here.
func appendJobEventJSON(b []byte, ev *orchestratorv1.JobEvent) ([]byte, bool) {
	w := jsonWriter{b: b, ok: true}
	w.open()
	if j := ev.GetJob(); j != nil {
		w.key("job")
		w.job(j)
	}
	w.str("rootId", ev.GetRootId())
	w.close()
	return w.b, w.ok
}

// jsonWriter appends JSON to b; ok turns false at the first value it
// cannot render as protojson does. first is whether the object being
// written has no member yet.
type jsonWriter struct {
	b     []byte
	ok    bool
	first bool
}

func (w *jsonWriter) open() { w.b, w.first = append(w.b, '{'), true }

func (w *jsonWriter) close() { w.b, w.first = append(w.b, '}'), false }

// key starts a member of the object being written.
func (w *jsonWriter) key(name string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

// str writes member name if s is set.
func (w *jsonWriter) str(name, s string) {
	if s != "" {
		w.key(name)
		w.string(s)
	}
}

func (w *jsonWriter) job(j *orchestratorv1.Job) {
	w.open()
	w.str("id", j.GetId())
	w.str("parentId", j.GetParentId())
	w.enum("type", int32(j.GetType()), orchestratorv1.JobType_name)
	w.enum("status", int32(j.GetStatus()), orchestratorv1.JobStatus_name)
	if sc := j.GetScope(); sc != nil {
		w.key("scope")
		w.scope(sc)
	}
	w.str("title", j.GetTitle())
	w.str("toolName", j.GetToolName())
	w.structMember("input", j.GetInput())
	w.structMember("output", j.GetOutput())
	w.str("error", j.GetError())
	if n := j.GetAttempts(); n != 0 {
		w.key("attempts")
		w.b = strconv.AppendInt(w.b, int64(n), 10)
	}
	w.str("idempotencyKey", j.GetIdempotencyKey())
	w.timestamp("createTime", j.GetCreateTime())
	w.timestamp("startTime", j.GetStartTime())
	w.timestamp("endTime", j.GetEndTime())
	if children := j.GetChildren(); len(children) > 0 {
		w.key("children")
		w.b = append(w.b, '[')
		for i, c := range children {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			if c == nil {
				w.ok = false
				return
			}
			w.job(c)
		}
		w.b = append(w.b, ']')
	}
	w.close()
}

func (w *jsonWriter) scope(sc *commonv1.Scope) {
	w.open()
	w.str("tenantId", sc.GetTenantId())
	w.str("projectId", sc.GetProjectId())
	w.close()
}

// enum writes member name, an enum's value by its name, if set.
func (w *jsonWriter) enum(name string, v int32, names map[int32]string) {
	if v == 0 {
		return
	}
	s, ok := names[v]
	if !ok {
		w.ok = false // protojson writes the number
		return
	}
	w.key(name)
	w.string(s)
}

// The range of a Timestamp protojson writes: 0001-01-01 to 9999-12-31.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

// timestamp writes member name as RFC 3339 in UTC with 0, 3, 6 or 9
// fractional digits, if ts is set.
func (w *jsonWriter) timestamp(name string, ts *timestamppb.Timestamp) {
	if ts == nil {
		return
	}
	secs, nanos := ts.GetSeconds(), ts.GetNanos()
	if secs < minTimestampSeconds || secs > maxTimestampSeconds || nanos < 0 || nanos >= 1e9 {
		w.ok = false
		return
	}
	w.key(name)
	w.b = append(w.b, '"')
	w.b = time.Unix(secs, 0).UTC().AppendFormat(w.b, "2006-01-02T15:04:05")
	if nanos != 0 {
		digits, frac := 9, int64(nanos)
		for digits > 3 && frac%1000 == 0 {
			digits, frac = digits-3, frac/1000
		}
		w.b = append(w.b, '.')
		s := strconv.FormatInt(frac, 10)
		for range digits - len(s) {
			w.b = append(w.b, '0')
		}
		w.b = append(w.b, s...)
	}
	w.b = append(w.b, 'Z', '"')
}

// structMember writes member name if s is set.
func (w *jsonWriter) structMember(name string, s *structpb.Struct) {
	if s != nil {
		w.key(name)
		w.structValue(s)
	}
}

func (w *jsonWriter) structValue(s *structpb.Struct) {
	fields := s.GetFields()
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	w.open()
	for _, k := range keys {
		if !utf8.ValidString(k) {
			w.ok = false
			return
		}
		if !w.first {
			w.b = append(w.b, ',')
		}
		w.first = false
		w.string(k)
		w.b = append(w.b, ':')
		w.value(fields[k])
	}
	w.close()
}

func (w *jsonWriter) value(v *structpb.Value) {
	kind := v.GetKind()
	// No kind, or one that is a nil pointer of its case's type, is no kind
	// to protojson ("none of the oneof fields is set"). Every case is a
	// pointer.
	if kind == nil || reflect.ValueOf(kind).IsNil() {
		w.ok = false
		return
	}
	switch k := kind.(type) {
	case *structpb.Value_NullValue:
		w.b = append(w.b, "null"...)
	case *structpb.Value_NumberValue:
		w.number(k.NumberValue)
	case *structpb.Value_StringValue:
		w.string(k.StringValue)
	case *structpb.Value_BoolValue:
		w.b = strconv.AppendBool(w.b, k.BoolValue)
	case *structpb.Value_StructValue:
		if k.StructValue == nil {
			w.ok = false
			return
		}
		w.structValue(k.StructValue)
	case *structpb.Value_ListValue:
		if k.ListValue == nil {
			w.ok = false
			return
		}
		w.b = append(w.b, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.value(e)
		}
		w.b = append(w.b, ']')
	default: // a kind added to Value since
		w.ok = false
	}
}

// number writes n as protojson writes a double: encoding/json's form, and
// an exponent of one digit without the leading zero.
func (w *jsonWriter) number(n float64) {
	if math.IsNaN(n) || math.IsInf(n, 0) {
		w.ok = false // protojson refuses it in a Value
		return
	}
	format := byte('f')
	if abs := math.Abs(n); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.b = strconv.AppendFloat(w.b, n, format, -1, 64)
	if format == 'e' {
		if n := len(w.b); n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

// string writes s quoted as protojson does: only '"', '\\' and control
// characters escaped; not UTF-8 is protojson's error.
func (w *jsonWriter) string(s string) {
	w.b = append(w.b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				w.ok = false
				return
			}
			i += n
			continue
		}
		if c >= ' ' && c != '"' && c != '\\' {
			i++
			continue
		}
		w.b = append(w.b, s[start:i]...)
		switch c {
		case '"', '\\':
			w.b = append(w.b, '\\', c)
		case '\b':
			w.b = append(w.b, '\\', 'b')
		case '\f':
			w.b = append(w.b, '\\', 'f')
		case '\n':
			w.b = append(w.b, '\\', 'n')
		case '\r':
			w.b = append(w.b, '\\', 'r')
		case '\t':
			w.b = append(w.b, '\\', 't')
		default:
			w.b = append(w.b, '\\', 'u', '0', '0', hexDigit[c>>4], hexDigit[c&0xf])
		}
		i++
		start = i
	}
	w.b = append(w.b, s[start:]...)
	w.b = append(w.b, '"')
}

const hexDigit = "0123456789abcdef"
