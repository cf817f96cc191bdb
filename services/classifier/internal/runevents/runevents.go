// Package runevents names the events of a classification run, exactly as the
// original classification agent's SSE protocol does (agent.run.started,
// agent.run.awaiting_fetch_approval, ...), builds each with the logMessage
// and data it carried there, and turns them into the mesh's event envelope
// for the checkpoint outbox and NATS.
//
// An [Event] is built by the state machine as part of a transition and
// written into the run's checkpoint document in the same write as the new
// state (see libs/events: per-document outbox); the relay publishes it on
// [Subject], and the gRPC stream (and the gateway's SSE replay) read it back
// from JetStream.
package runevents

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/agentmesh/agentmesh/libs/events"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Event types, as the original agent emits them.
const (
	RunStarted   = "agent.run.started"
	RunResumed   = "agent.run.resumed"
	RunCompleted = "agent.run.completed"
	RunStopped   = "agent.run.stopped"
	RunError     = "agent.run.error"

	PlanningStarted   = "agent.run.planning.started"
	PlanningCompleted = "agent.run.planning.completed"
	FetchingStarted   = "agent.run.fetching.started"
	FetchingCompleted = "agent.run.fetching.completed"
	Replanning        = "agent.run.replanning"

	AwaitingFetchApproval = "agent.run.awaiting_fetch_approval"
	AwaitingBatchApproval = "agent.run.awaiting_batch_approval"

	ClassifyingStarted   = "agent.run.classifying.started"
	ClassifyingCompleted = "agent.run.classifying.completed"
	SavingStarted        = "agent.run.saving.started"
	SavingCompleted      = "agent.run.saving.completed"

	PlanSummaryStarted  = "agent.run.plan_summary.started"
	PlanSummaryDelta    = "agent.run.plan_summary.delta"
	PlanSummaryDone     = "agent.run.plan_summary.done"
	BatchSummaryStarted = "agent.run.batch_summary.started"
	BatchSummaryDelta   = "agent.run.batch_summary.delta"
	BatchSummaryDone    = "agent.run.batch_summary.done"
	SummaryStarted      = "agent.run.summary.started"
	SummaryDelta        = "agent.run.summary.delta"
	SummaryDone         = "agent.run.summary.done"

	BatchData = "agent.run.batch_data"
	FinalData = "agent.run.final_data"
)

// Source is the envelope source of every run event.
const Source = "classifier"

// Domain is the subject domain token of run events.
const Domain = "classifier"

// Event is one run event: its type, the human-readable log line and the
// structured data (a JSON-shaped value: map[string]any, []any, string,
// float64, bool or nil; other Go values are normalised through JSON when the
// event is encoded).
type Event struct {
	// Type is one of the constants above.
	Type string
	// LogMessage is the line a UI shows in its activity log; empty for
	// *.delta and data events, as in the original.
	LogMessage string
	// Data is the event's payload; nil when the event carries none.
	Data any
}

// Subject is the NATS subject of an event of type typ of run runID of
// tenant: am.evt.<tenant>.classifier.<runID>.<kind>, where kind is
// "started" (agent.run.started, agent.run.resumed), "awaiting" (the two
// approval requests), "ended" (agent.run.completed, agent.run.stopped) or
// "event" (every other type).
// The type itself is in the envelope. JetStream keeps state for every
// subject its events stream holds, for as long as it keeps the events: a
// subject per type was 27 a run. A consumer can still pick the runs
// waiting for a human (am.evt.*.classifier.*.awaiting) or ended.
func Subject(tenant, runID, typ string) string {
	return events.EventSubject(tenant, Domain, runID, subjectKind(typ))
}

// Subject kinds (the last token of a run event's subject).
const (
	KindStarted  = "started"
	KindAwaiting = "awaiting"
	KindEnded    = "ended"
	KindEvent    = "event"
)

func subjectKind(typ string) string {
	switch typ {
	case RunStarted, RunResumed:
		return KindStarted
	case AwaitingFetchApproval, AwaitingBatchApproval:
		return KindAwaiting
	case RunCompleted, RunStopped:
		return KindEnded
	}
	return KindEvent
}

// SubjectFilter matches every event of one run, for [events.Bus.Replay].
func SubjectFilter(tenant, runID string) string {
	return events.EntityEventsSubject(tenant, Domain, runID)
}

// Value converts data to a protobuf Value through its JSON form, so any
// JSON-marshalable Go value (structs with json tags, []string, ints) is
// accepted.
func Value(data any) (*structpb.Value, error) {
	if data == nil {
		return structpb.NewNullValue(), nil
	}
	if s, ok := data.(string); ok {
		return structpb.NewStringValue(s), nil
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("runevents: marshal data: %w", err)
	}
	v := &structpb.Value{}
	if err := v.UnmarshalJSON(raw); err != nil {
		return nil, fmt.Errorf("runevents: data to value: %w", err)
	}
	return v, nil
}

// Proto returns e as a RunEvent of run runID (without sequence and time,
// which Envelope adds).
func (e Event) Proto(runID string) (*classifierv1.RunEvent, error) {
	v, err := Value(e.Data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Type, err)
	}
	return &classifierv1.RunEvent{Type: e.Type, LogMessage: e.LogMessage, Data: v, RunId: runID}, nil
}

// Envelope wraps e in the mesh's event envelope with a fresh id, the run id
// as correlation id and the RunEvent as payload, and returns it with its
// outbox entry for the run's subject. seq is the event's position in its
// run (1 for the run's first event): the id clients see and reconnect
// with. It is numbered per run, not taken from the JetStream stream that
// all tenants share, so an id tells nothing about other runs' activity.
func (e Event) Envelope(scope *commonv1.Scope, runID string, seq uint64) (events.OutboxEntry, error) {
	re, err := e.Proto(runID)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	re.Sequence = seq
	env, err := events.NewEvent(e.Type, Source, scope, runID, re)
	if err != nil {
		return events.OutboxEntry{}, err
	}
	re.Time = env.GetTime()
	if err := env.GetPayload().MarshalFrom(re); err != nil {
		return events.OutboxEntry{}, fmt.Errorf("runevents: pack %s: %w", e.Type, err)
	}
	return events.OutboxEntryFor(Subject(scope.GetTenantId(), runID, e.Type), env)
}

// Decode extracts the RunEvent from an envelope read back from JetStream.
// Its sequence is the per-run one Envelope recorded (0 for an event
// written before runs numbered their events); a missing time is taken from
// the envelope.
func Decode(env *commonv1.Event) (*classifierv1.RunEvent, error) {
	re := &classifierv1.RunEvent{}
	if env.GetPayload() == nil {
		return nil, fmt.Errorf("runevents: event %s has no payload", env.GetId())
	}
	if err := env.GetPayload().UnmarshalTo(re); err != nil {
		return nil, fmt.Errorf("runevents: event %s: %w", env.GetId(), err)
	}
	if re.GetTime() == nil {
		re.Time = env.GetTime()
	}
	if re.GetTime() == nil {
		re.Time = timestamppb.Now()
	}
	return re, nil
}

// Chunks splits text into pieces of at most size bytes, never inside a
// UTF-8 sequence, for the *.delta events of a streamed text. Empty text
// gives no chunks.
func Chunks(text string, size int) []string {
	if size <= 0 {
		size = 500
	}
	var out []string
	for len(text) > 0 {
		if len(text) <= size {
			out = append(out, text)
			break
		}
		cut := size
		for cut > 0 && !startsRune(text[cut]) {
			cut--
		}
		if cut == 0 {
			cut = size
		}
		out = append(out, text[:cut])
		text = text[cut:]
	}
	return out
}

// startsRune reports whether b can begin a UTF-8 sequence.
func startsRune(b byte) bool { return b&0xC0 != 0x80 }

// Stream returns the started, delta... and done events of a streamed text,
// as the original's plan_summary, batch_summary and summary events:
// prefix is e.g. "agent.run.summary", what names the text in the log lines.
func Stream(prefix, startedLog, doneLog, text string, chunkSize int) []Event {
	evs := []Event{{Type: prefix + ".started", LogMessage: startedLog}}
	for _, c := range Chunks(text, chunkSize) {
		evs = append(evs, Event{Type: prefix + ".delta", Data: c})
	}
	return append(evs, Event{Type: prefix + ".done", LogMessage: doneLog})
}
