package httpgateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// protojsonCompact is what the REST API wrote for ev before
// appendJobEventJSON, without protojson's random spaces.
func protojsonCompact(t *testing.T, ev *orchestratorv1.JobEvent) []byte {
	t.Helper()
	data, err := jsonOptions.Marshal(ev)
	if err != nil {
		t.Fatalf("protojson: %v", err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, data); err != nil {
		t.Fatalf("protojson wrote invalid JSON %s: %v", data, err)
	}
	return out.Bytes()
}

func assertAsProtojson(t *testing.T, what string, ev *orchestratorv1.JobEvent) {
	t.Helper()
	want := protojsonCompact(t, ev)
	got, ok := appendJobEventJSON([]byte("prefix"), ev)
	if !ok {
		t.Fatalf("%s: not rendered (want %s)", what, want)
	}
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("%s: did not append: %s", what, got)
	}
	if got = got[len("prefix"):]; !bytes.Equal(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// fill sets every field of m, each to a value unlike its default: a field
// added to the job's messages is then written by protojson and must be by
// appendJobEventJSON too. depth bounds the lists of messages (children);
// a message nested deeper than maxFillNesting is left unset, so a
// recursive singular field does not recurse for ever.
func fill(m protoreflect.Message, depth int) { fillNested(m, depth, 0) }

const maxFillNesting = 8

func fillNested(m protoreflect.Message, depth, nesting int) {
	if nesting > maxFillNesting {
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		switch {
		case fd.IsList() && fd.Message() != nil:
			if depth == 0 {
				continue
			}
			list := m.Mutable(fd).List()
			for range 2 {
				e := list.NewElement()
				fillNested(e.Message(), depth-1, nesting+1)
				list.Append(e)
			}
		case fd.IsList() || fd.IsMap():
			panic(fmt.Sprintf("fill: %s: add this kind of field", fd.FullName()))
		case fd.Message() != nil:
			switch fd.Message().FullName() {
			case "google.protobuf.Struct":
				s, err := structpb.NewStruct(map[string]any{
					"of": name, "n": 1.5, "list": []any{true, nil, "x\n"}, "nested": map[string]any{"b": false},
				})
				if err != nil {
					panic(err)
				}
				m.Set(fd, protoreflect.ValueOfMessage(s.ProtoReflect()))
			case "google.protobuf.Timestamp":
				ts := timestamppb.New(time.Date(2026, 11, 28, 16, 3, 11, 120_000_000+i*1000, time.UTC))
				m.Set(fd, protoreflect.ValueOfMessage(ts.ProtoReflect()))
			default:
				fillNested(m.Mutable(fd).Message(), depth, nesting+1)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(name+` "é"`))
		case fd.Kind() == protoreflect.EnumKind:
			m.Set(fd, protoreflect.ValueOfEnum(fd.Enum().Values().Get(fd.Enum().Values().Len()-1).Number()))
		case fd.Kind() == protoreflect.Int32Kind:
			m.Set(fd, protoreflect.ValueOfInt32(int32(-3-i)))
		default:
			panic(fmt.Sprintf("fill: %s: add this kind of field", fd.FullName()))
		}
	}
}

func TestJobEventJSONIsProtojsons(t *testing.T) {
	t.Parallel()
	full := &orchestratorv1.JobEvent{}
	fill(full.ProtoReflect(), 2)
	assertAsProtojson(t, "every field set", full)
	if !bytes.Contains(protojsonCompact(t, full), []byte(`"children":[{`)) {
		t.Fatal("fill set no children")
	}

	assertAsProtojson(t, "empty", &orchestratorv1.JobEvent{})
	assertAsProtojson(t, "empty job, scope and structs", &orchestratorv1.JobEvent{Job: &orchestratorv1.Job{
		Scope: &commonv1.Scope{}, Input: &structpb.Struct{}, Output: &structpb.Struct{Fields: map[string]*structpb.Value{}},
	}})

	for _, s := range []string{
		"", "plain", `q"uote`, `back\slash`, "\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x20\x7f",
		"<html>&amp;</html>", "é中𝄞", "\u2028\u2029", "\ufffd", "end\\",
	} {
		assertAsProtojson(t, fmt.Sprintf("string %q", s), &orchestratorv1.JobEvent{
			RootId: s,
			Job: &orchestratorv1.Job{Id: s, Error: s, Input: &structpb.Struct{Fields: map[string]*structpb.Value{
				s: structpb.NewStringValue(s),
			}}},
		})
	}
	for _, n := range []float64{
		0, math.Copysign(0, -1), 1, -1, 0.1, 1.5, 123456789.125, 1e20, 1e21, 1.5e21, -1e21, 1e-6, 1e-7, -1e-7, 1.2345e-7,
		5e-324, math.MaxFloat64, -math.MaxFloat64, 1e100, 1e-100, float64(1 << 53), 3.0000000000000004,
	} {
		assertAsProtojson(t, fmt.Sprintf("number %v", n), &orchestratorv1.JobEvent{Job: &orchestratorv1.Job{
			Output: &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(n)}},
		}})
	}
	for _, ts := range []*timestamppb.Timestamp{
		{}, {Nanos: 1}, {Nanos: 1000}, {Nanos: 1_000_000}, {Nanos: 10}, {Nanos: 120_000}, {Nanos: 999_999_999},
		{Seconds: minTimestampSeconds}, {Seconds: maxTimestampSeconds, Nanos: 999_999_999}, {Seconds: -1, Nanos: 5},
		timestamppb.New(time.Date(2026, 11, 28, 16, 3, 11, 0, time.FixedZone("east", 5*3600))),
	} {
		assertAsProtojson(t, fmt.Sprintf("timestamp %v", ts), &orchestratorv1.JobEvent{Job: &orchestratorv1.Job{
			CreateTime: ts, StartTime: ts, EndTime: ts,
		}})
	}

	// Generated structs: every kind of value, nested.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 300 {
		s, err := structpb.NewStruct(randomObject(rng, 3))
		if err != nil {
			t.Fatal(err)
		}
		assertAsProtojson(t, fmt.Sprintf("generated %d", i), &orchestratorv1.JobEvent{Job: &orchestratorv1.Job{Input: s}})
	}
}

func randomObject(rng *rand.Rand, depth int) map[string]any {
	m := map[string]any{}
	for range rng.IntN(6) {
		m[randomString(rng)] = randomValue(rng, depth)
	}
	return m
}

func randomValue(rng *rand.Rand, depth int) any {
	kinds := 4
	if depth > 0 {
		kinds = 6
	}
	switch rng.IntN(kinds) {
	case 0:
		return nil
	case 1:
		return rng.IntN(2) == 0
	case 2:
		return math.Float64frombits(rng.Uint64()&^(0x7ff<<52) | uint64(rng.IntN(0x7ff))<<52) // finite, any exponent
	case 3:
		return randomString(rng)
	case 4:
		return randomObject(rng, depth-1)
	default:
		list := make([]any, rng.IntN(4))
		for i := range list {
			list[i] = randomValue(rng, depth-1)
		}
		return list
	}
}

func randomString(rng *rand.Rand) string {
	runes := []rune{'a', 'Z', '0', ' ', '"', '\\', '\n', '\x00', '\x1f', 0x7f, 'é', 0x2028, 0xfffd, 0x1d11e}
	r := make([]rune, rng.IntN(6))
	for i := range r {
		r[i] = runes[rng.IntN(len(runes))]
	}
	return string(r)
}

// What protojson renders otherwise or refuses is left to it.
func TestJobEventJSONLeavesTheRestToProtojson(t *testing.T) {
	t.Parallel()
	nan := structpb.NewNumberValue(math.NaN())
	for what, ev := range map[string]*orchestratorv1.JobEvent{
		"NaN":               {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"n": nan}}}},
		"infinity":          {Job: &orchestratorv1.Job{Output: &structpb.Struct{Fields: map[string]*structpb.Value{"n": structpb.NewNumberValue(math.Inf(-1))}}}},
		"invalid UTF-8":     {RootId: "a\xffb"},
		"invalid UTF-8 key": {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"\xff": structpb.NewNullValue()}}}},
		"unnamed enum":      {Job: &orchestratorv1.Job{Status: 99}},
		"unnamed type":      {Job: &orchestratorv1.Job{Type: -1}},
		"before year 1":     {Job: &orchestratorv1.Job{CreateTime: &timestamppb.Timestamp{Seconds: minTimestampSeconds - 1}}},
		"after year 9999":   {Job: &orchestratorv1.Job{EndTime: &timestamppb.Timestamp{Seconds: maxTimestampSeconds + 1}}},
		"negative nanos":    {Job: &orchestratorv1.Job{StartTime: &timestamppb.Timestamp{Nanos: -1}}},
		"a second of nanos": {Job: &orchestratorv1.Job{StartTime: &timestamppb.Timestamp{Nanos: 1e9}}},
		"value of no kind":  {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {}}}}},
		"nil value":         {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": nil}}}},
		"nil list":          {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: &structpb.Value_ListValue{}}}}}},
		"nil struct":        {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: &structpb.Value_StructValue{}}}}}},
		"nil null kind":     {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_NullValue)(nil)}}}}},
		"nil number kind":   {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_NumberValue)(nil)}}}}},
		"nil string kind":   {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_StringValue)(nil)}}}}},
		"nil bool kind":     {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_BoolValue)(nil)}}}}},
		"nil struct kind":   {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_StructValue)(nil)}}}}},
		"nil list kind":     {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"v": {Kind: (*structpb.Value_ListValue)(nil)}}}}},
		"nil child":         {Job: &orchestratorv1.Job{Children: []*orchestratorv1.Job{{Id: "a"}, nil}}},
		"NaN in a child":    {Job: &orchestratorv1.Job{Children: []*orchestratorv1.Job{{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"n": nan}}}}}},
		"NaN in a list":     {Job: &orchestratorv1.Job{Input: &structpb.Struct{Fields: map[string]*structpb.Value{"l": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{nan}})}}}},
	} {
		if got, ok := appendJobEventJSON(nil, ev); ok {
			t.Errorf("%s: rendered %s, want it left to protojson", what, got)
		}
		// The event is what protojson makes of it, its error included.
		want, wantErr := jsonOptions.Marshal(ev)
		got, gotErr := jobEvent(&orchestratorv1.WatchJobResponse{Sequence: 3, Event: ev})
		if (gotErr != nil) != (wantErr != nil) || wantErr == nil && !bytes.Equal(got.data, want) {
			t.Errorf("%s: event %s (%v), want protojson's %s (%v)", what, got.data, gotErr, want, wantErr)
		}
	}
}

func BenchmarkJobEventJSON(b *testing.B) {
	ev := &orchestratorv1.JobEvent{}
	fill(ev.ProtoReflect(), 0)
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonOptions.Marshal(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("appendJobEventJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := appendJobEventJSON(nil, ev); !ok {
				b.Fatal("not rendered")
			}
		}
	})
}
