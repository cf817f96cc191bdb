package httpgateway

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// Media types of streamed responses.
const (
	mimeEventStream = "text/event-stream"
	mimeNDJSON      = "application/x-ndjson"
)

// jsonOptions render messages as the REST API does everywhere: lowerCamelCase
// names, unset fields omitted.
var jsonOptions = protojson.MarshalOptions{EmitUnpopulated: false, UseProtoNames: false}

// newJSONMarshaler is the marshaler of unary requests and responses.
func newJSONMarshaler() *runtime.JSONPb {
	return &runtime.JSONPb{
		MarshalOptions: jsonOptions,
		// Unknown request fields are an error that names the field, so a
		// typo is a 400 rather than a silently ignored setting.
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}
}

// sseEvent is one Server-Sent Event.
type sseEvent struct {
	id   string // empty: no id line
	name string // empty: no event line (the client sees "message")
	data []byte // JSON, one line
}

// encode writes the event in the text/event-stream format.
func (e sseEvent) encode() []byte {
	var b bytes.Buffer
	b.Grow(len(e.id) + len(e.name) + len(e.data) + 32)
	if e.id != "" {
		b.WriteString("id: " + oneLine(e.id) + "\n")
	}
	if e.name != "" {
		b.WriteString("event: " + oneLine(e.name) + "\n")
	}
	// JSON from protojson is one line, but a data field may not hold a
	// newline, so split defensively: the client joins data lines with "\n".
	for line := range bytes.SplitSeq(e.data, []byte("\n")) {
		b.WriteString("data: ")
		b.Write(bytes.TrimSuffix(line, []byte("\r")))
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	return b.Bytes()
}

func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// errorEvent is how a failed stream ends: `event: error` with {code, message}.
func errorEvent(st *status.Status) sseEvent {
	data, _ := json.Marshal(struct {
		Code    int32  `json:"code"`
		Message string `json:"message"`
	}{int32(st.Code()), st.Message()})
	return sseEvent{name: "error", data: data}
}

// runEventer is every classifier stream response: one RunEvent each.
type runEventer interface {
	GetEvent() *classifierv1.RunEvent
}

// streamEvents maps each server stream's response type to its SSE event.
// Each stream has its own naming, fixed by the issue that specifies it.
var streamEvents = map[protoreflect.FullName]func(proto.Message) (sseEvent, error){
	// The oneof case, as the chat loop names its events:
	// response_chunk → ResponseChunk, ..., error → Error; the id is the
	// event's sequence, which a watch of the turn resumes after.
	proto.MessageName(&orchestratorv1.StreamMessageResponse{}): func(m proto.Message) (sseEvent, error) {
		return turnEvent(m.(*orchestratorv1.StreamMessageResponse))
	},
	// A watched turn's events, exactly as StreamMessage sent them.
	proto.MessageName(&orchestratorv1.WatchTurnResponse{}): func(m proto.Message) (sseEvent, error) {
		return turnEvent(m.(*orchestratorv1.WatchTurnResponse).GetEvent())
	},
	// content_delta, reasoning_delta, tool_call, end.
	proto.MessageName(&modelv1.ChatStreamResponse{}): func(m proto.Message) (sseEvent, error) {
		return oneofEvent(m, "chunk", func(s string) string { return s })
	},
	proto.MessageName(&orchestratorv1.WatchJobResponse{}): func(m proto.Message) (sseEvent, error) {
		return jobEvent(m.(*orchestratorv1.WatchJobResponse))
	},
	proto.MessageName(&indexerv1.WatchIntakeResponse{}): func(m proto.Message) (sseEvent, error) {
		return intakeEvent(m.(*indexerv1.WatchIntakeResponse))
	},
	proto.MessageName(&classifierv1.StartRunResponse{}):    classifierEvent,
	proto.MessageName(&classifierv1.ResumeRunResponse{}):   classifierEvent,
	proto.MessageName(&classifierv1.SendCommandResponse{}): classifierEvent,
}

// eventOf maps one streamed response message to its SSE event; a type
// without a mapping becomes an unnamed ("message") event with its JSON.
func eventOf(m proto.Message) (sseEvent, error) {
	if enc, ok := streamEvents[proto.MessageName(m)]; ok {
		return enc(m)
	}
	data, err := jsonOptions.Marshal(m)
	return sseEvent{data: data}, err
}

func classifierEvent(m proto.Message) (sseEvent, error) {
	return runEvent(m.(runEventer).GetEvent())
}

// oneofEvent names the event after the oneof case that is set and carries
// that case's value as data.
func oneofEvent(m proto.Message, oneof protoreflect.Name, style func(string) string) (sseEvent, error) {
	rm := m.ProtoReflect()
	od := rm.Descriptor().Oneofs().ByName(oneof)
	var fd protoreflect.FieldDescriptor
	if od != nil {
		fd = rm.WhichOneof(od)
	}
	if fd == nil {
		data, err := jsonOptions.Marshal(m)
		return sseEvent{data: data}, err
	}
	name := style(string(fd.Name()))
	if fd.Message() != nil {
		data, err := jsonOptions.Marshal(rm.Get(fd).Message().Interface())
		return sseEvent{name: name, data: data}, err
	}
	// A scalar case: take its JSON from the whole message, so strings,
	// enums and 64-bit integers are spelled exactly as in REST responses.
	whole, err := jsonOptions.Marshal(m)
	if err != nil {
		return sseEvent{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(whole, &fields); err != nil {
		return sseEvent{}, err
	}
	data := fields[fd.JSONName()]
	if data == nil {
		data = json.RawMessage(`""`)
	}
	return sseEvent{name: name, data: data}, nil
}

// turnEvent is one chat turn event: named after its oneof case, with its
// sequence as id.
func turnEvent(m *orchestratorv1.StreamMessageResponse) (sseEvent, error) {
	if m == nil {
		m = &orchestratorv1.StreamMessageResponse{}
	}
	ev, err := oneofEvent(m, "event", upperCamel)
	ev.id = sequenceID(m.GetSequence())
	return ev, err
}

// upperCamel turns a snake_case name into UpperCamelCase.
func upperCamel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

// jobEvent: `event: job.<status>` (job.running, job.waiting_for_children,
// ...), `id: <sequence>`, data the JobEvent.
func jobEvent(m *orchestratorv1.WatchJobResponse) (sseEvent, error) {
	st := m.GetEvent().GetJob().GetStatus()
	name := "job." + strings.ToLower(strings.TrimPrefix(st.String(), "JOB_STATUS_"))
	ev := m.GetEvent()
	if ev == nil {
		ev = &orchestratorv1.JobEvent{}
	}
	data, ok := appendJobEventJSON(make([]byte, 0, 1024), ev)
	var err error
	if !ok {
		data, err = jsonOptions.Marshal(ev)
	}
	return sseEvent{id: sequenceID(m.GetSequence()), name: name, data: data}, err
}

// intakeEvent: `event: intake.<name>` (intake.vision_stage1, ...,
// intake.routing, intake.finished), as the events are named on NATS;
// `id: <sequence>`, data the IntakePhaseEvent.
func intakeEvent(m *indexerv1.WatchIntakeResponse) (sseEvent, error) {
	ev := m.GetEvent()
	if ev == nil {
		ev = &indexerv1.IntakePhaseEvent{}
	}
	data, err := jsonOptions.Marshal(ev)
	return sseEvent{id: sequenceID(m.GetSequence()), name: "intake." + m.GetName(), data: data}, err
}

// runEvent reproduces the classification agent's events as its original
// clients read them: the event name is the type, the data
// {"type", "logMessage", "data"} with absent members left out.
func runEvent(e *classifierv1.RunEvent) (sseEvent, error) {
	payload := struct {
		Type       string          `json:"type"`
		LogMessage string          `json:"logMessage,omitempty"`
		Data       json.RawMessage `json:"data,omitempty"`
	}{Type: e.GetType(), LogMessage: e.GetLogMessage()}
	if e.GetData() != nil {
		d, err := jsonOptions.Marshal(e.GetData())
		if err != nil {
			return sseEvent{}, err
		}
		payload.Data = d
	}
	// Text is kept as written: no \u003c for "<" in markdown summaries.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(payload); err != nil {
		return sseEvent{}, err
	}
	return sseEvent{id: sequenceID(e.GetSequence()), name: e.GetType(), data: bytes.TrimSuffix(b.Bytes(), []byte("\n"))}, nil
}

func sequenceID(seq uint64) string {
	if seq == 0 {
		return ""
	}
	return strconv.FormatUint(seq, 10)
}

// eventStreamMarshaler is the ServeMux's default marshaler. Unary messages
// are plain JSON; the messages of a server stream, which runtime hands over
// wrapped as {"result": msg} or {"error": status}, become Server-Sent Events
// (one complete event per Marshal, so no delimiter is needed).
type eventStreamMarshaler struct {
	*runtime.JSONPb
}

var (
	_ runtime.Marshaler         = eventStreamMarshaler{}
	_ runtime.Delimited         = eventStreamMarshaler{}
	_ runtime.StreamContentType = eventStreamMarshaler{}
)

// Marshal encodes a stream chunk as an SSE event and anything else as JSON.
func (m eventStreamMarshaler) Marshal(v any) ([]byte, error) {
	switch chunk := v.(type) {
	case map[string]any:
		if msg, ok := chunk["result"].(proto.Message); ok && len(chunk) == 1 {
			ev, err := eventOf(msg)
			if err != nil {
				return nil, err
			}
			return ev.encode(), nil
		}
	case map[string]proto.Message:
		if st, ok := chunk["error"].(*spb.Status); ok && len(chunk) == 1 {
			return errorEvent(status.FromProto(st)).encode(), nil
		}
	}
	return m.JSONPb.Marshal(v)
}

// StreamContentType is text/event-stream.
func (eventStreamMarshaler) StreamContentType(any) string { return mimeEventStream }

// Delimiter is empty: each event ends with its own blank line.
func (eventStreamMarshaler) Delimiter() []byte { return nil }

// ndjsonMarshaler serves clients that ask for application/x-ndjson:
// grpc-gateway's own stream format, one {"result": ...} object a line.
type ndjsonMarshaler struct {
	*runtime.JSONPb
}

// StreamContentType is application/x-ndjson.
func (ndjsonMarshaler) StreamContentType(any) string { return mimeNDJSON }

// NewDecoder decodes request bodies (see bodyDecoder).
func (m eventStreamMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return newBodyDecoder(m.JSONPb, r)
}

// NewDecoder decodes request bodies (see bodyDecoder).
func (m ndjsonMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return newBodyDecoder(m.JSONPb, r)
}

func newBodyDecoder(m *runtime.JSONPb, r io.Reader) bodyDecoder {
	return bodyDecoder{r: r, opts: m.UnmarshalOptions, fallback: m.NewDecoder(r).Decode}
}
