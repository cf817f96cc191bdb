package events

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// NewEvent builds an event envelope with a fresh UUID id and the current
// time. typ is the dotted event type ("job.complete"), source the emitting
// service; both are required. scope and correlationID may be empty. payload,
// if not nil, is packed into an Any. The subject is set when the event is
// published ([Bus.Publish]) or put into an outbox ([OutboxEntryFor]).
//
// Keep the returned event (or its id) when retrying a publish: the id is what
// makes retries deduplicate.
func NewEvent(typ, source string, scope *commonv1.Scope, correlationID string, payload proto.Message) (*commonv1.Event, error) {
	if typ == "" {
		return nil, errors.New("events: new event: empty type")
	}
	if source == "" {
		return nil, errors.New("events: new event: empty source")
	}
	ev := &commonv1.Event{
		Id:            uuid.NewString(),
		Type:          typ,
		Source:        source,
		Time:          timestamppb.Now(),
		Scope:         scope,
		CorrelationId: correlationID,
	}
	if payload != nil {
		a, err := anypb.New(payload)
		if err != nil {
			return nil, fmt.Errorf("events: new event %s: pack payload: %w", typ, err)
		}
		ev.Payload = a
	}
	return ev, nil
}

// marshalEvent validates ev and encodes it after setting its subject.
func marshalEvent(subject string, ev *commonv1.Event) ([]byte, error) {
	if ev == nil {
		return nil, errors.New("events: nil event")
	}
	if ev.GetId() == "" {
		return nil, errors.New("events: event has no id")
	}
	if err := validPublishSubject(subject); err != nil {
		return nil, err
	}
	ev.Subject = subject
	data, err := proto.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("events: marshal event %s: %w", ev.GetId(), err)
	}
	return data, nil
}

// decodeEvent decodes an envelope and rejects one without an id.
func decodeEvent(data []byte) (*commonv1.Event, error) {
	ev := &commonv1.Event{}
	if err := proto.Unmarshal(data, ev); err != nil {
		return nil, fmt.Errorf("decode event: %w", err)
	}
	if ev.GetId() == "" {
		return nil, errors.New("decode event: no id")
	}
	return ev, nil
}
