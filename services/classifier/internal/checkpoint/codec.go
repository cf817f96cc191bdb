package checkpoint

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// contextDoc is the stored run context (schema version 1). Field names are
// part of the stored format: renaming one needs a new SchemaVersion. The
// parts empty in most of a run's steps are omitempty (read back as empty):
// the context is written whole at every step, and the embedded store
// (FerretDB) parses and rewrites every field, with a type entry each, at
// every update. Whether a state needs one of them is checked on load, as
// before (a state without its pending batch is corrupt).
type contextDoc struct {
	Instruction       string           `bson:"instruction"`
	Plans             []planDoc        `bson:"plans"`
	FetchedIDs        []string         `bson:"fetched_ids"`
	FetchSample       *sampleDoc       `bson:"fetch_sample,omitempty"`
	ContinuationFetch bool             `bson:"continuation_fetch,omitempty"`
	BatchIDs          []string         `bson:"batch_ids,omitempty"`
	PendingBatch      []classification `bson:"pending_batch,omitempty"`
	LabelledIDs       []string         `bson:"labelled_ids"`
	Resolved          int              `bson:"resolved"`
	Unresolved        int              `bson:"unresolved"`
	ModelCalls        int              `bson:"model_calls"`
	Feedback          string           `bson:"feedback,omitempty"`
	ReplanReason      string           `bson:"replan_reason,omitempty"`
	ErrorMessage      string           `bson:"error_message,omitempty"`
	Summary           string           `bson:"summary,omitempty"`
}

type planDoc struct {
	TargetSampleSize       int    `bson:"target_sample_size"`
	Strategy               string `bson:"strategy"`
	DetailsMarkdown        string `bson:"details_markdown"`
	AdditionalInstructions string `bson:"additional_instructions,omitempty"`
	// QueryJSON is text, not a document: a refused query may hold keys
	// such as "$where" that must never become stored field names.
	QueryJSON string `bson:"query_json"`
	Refused   string `bson:"refused,omitempty"`
}

type sampleDoc struct {
	ID           string `bson:"id"`
	MessageCount int    `bson:"message_count"`
	Summary      string `bson:"summary"`
}

type classification struct {
	ConversationID string `bson:"conversation_id"`
	Label          string `bson:"label"`
	Reason         string `bson:"reason"`
}

// nonNil keeps empty lists as [] rather than null in the stored document.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func encodeContext(r statemachine.Run) contextDoc {
	c := contextDoc{
		Instruction: r.Instruction, FetchedIDs: nonNil(r.FetchedIDs), ContinuationFetch: r.ContinuationFetch,
		BatchIDs: nonNil(r.BatchIDs), LabelledIDs: nonNil(r.LabelledIDs), Resolved: r.Resolved, Unresolved: r.Unresolved,
		ModelCalls: r.ModelCalls, Feedback: r.Feedback, ReplanReason: r.ReplanReason,
		ErrorMessage: r.ErrorMessage, Summary: r.Summary,
		Plans: []planDoc{}, PendingBatch: []classification{},
	}
	for _, p := range r.Plans {
		c.Plans = append(c.Plans, planDoc{
			TargetSampleSize: p.TargetSampleSize, Strategy: p.Strategy, DetailsMarkdown: p.DetailsMarkdown,
			AdditionalInstructions: p.AdditionalInstructions, QueryJSON: p.QueryJSON, Refused: p.Refused,
		})
	}
	if s := r.FetchSample; s != nil {
		c.FetchSample = &sampleDoc{ID: s.ID, MessageCount: s.MessageCount, Summary: s.Summary}
	}
	for _, x := range r.PendingBatch {
		c.PendingBatch = append(c.PendingBatch, classification{ConversationID: x.ConversationID, Label: string(x.Label), Reason: x.Reason})
	}
	return c
}

// decode turns a stored document into a Record, or a *CorruptError naming
// what is wrong. Nothing is defaulted: a missing or mistyped part is
// corruption.
func decode(id string, raw bson.Raw) (Record, error) {
	var h header
	if err := bson.Unmarshal(raw, &h); err != nil {
		cerr := &CorruptError{ID: id, Version: -1, Cause: fmt.Errorf("header: %w", err)}
		// Salvage what can be read, so the run can be stopped and shown.
		if v, ok := raw.Lookup("version").AsInt64OK(); ok {
			cerr.Version = v
		}
		if s, ok := raw.Lookup("state").StringValueOK(); ok {
			cerr.State = statemachine.State(s)
		}
		if n, ok := raw.Lookup("event_count").AsInt64OK(); ok && n > 0 {
			cerr.EventCount = uint64(n)
		}
		return Record{}, cerr
	}
	corrupt := func(format string, args ...any) error {
		return &CorruptError{
			ID: h.ID, State: statemachine.State(h.State), Version: h.Version, StopReason: h.StopReason,
			EventCount: uint64(max(h.EventCount, 0)),
			CreateTime: h.CreateTime, UpdateTime: h.UpdateTime, Cause: fmt.Errorf(format, args...),
		}
	}
	switch {
	case h.SchemaVersion != SchemaVersion:
		return Record{}, corrupt("schema_version %d is not supported (this build reads %d)", h.SchemaVersion, SchemaVersion)
	case !statemachine.State(h.State).Valid():
		return Record{}, corrupt("unknown state %q", h.State)
	case len(h.Context) == 0:
		return Record{}, corrupt("no context")
	}
	var c contextDoc
	if err := bson.Unmarshal(h.Context, &c); err != nil {
		return Record{}, corrupt("context: %w", err)
	}
	run := statemachine.Run{
		ID: h.ID, TenantID: h.TenantID, ProjectID: h.ProjectID, Instruction: c.Instruction,
		State: statemachine.State(h.State), FetchedIDs: c.FetchedIDs, ContinuationFetch: c.ContinuationFetch,
		BatchIDs: c.BatchIDs, LabelledIDs: c.LabelledIDs, Resolved: c.Resolved, Unresolved: c.Unresolved,
		ModelCalls: c.ModelCalls, Feedback: c.Feedback, ReplanReason: c.ReplanReason,
		StopReason: h.StopReason, ErrorMessage: c.ErrorMessage, Summary: c.Summary,
		CreateTime: h.CreateTime, UpdateTime: h.UpdateTime,
	}
	for _, p := range c.Plans {
		run.Plans = append(run.Plans, statemachine.Plan{
			TargetSampleSize: p.TargetSampleSize, Strategy: p.Strategy, DetailsMarkdown: p.DetailsMarkdown,
			AdditionalInstructions: p.AdditionalInstructions, QueryJSON: p.QueryJSON, Refused: p.Refused,
		})
	}
	if s := c.FetchSample; s != nil {
		run.FetchSample = &statemachine.Sample{ID: s.ID, MessageCount: s.MessageCount, Summary: s.Summary}
	}
	for _, x := range c.PendingBatch {
		run.PendingBatch = append(run.PendingBatch, statemachine.Classification{
			ConversationID: x.ConversationID, Label: statemachine.Label(x.Label), Reason: x.Reason,
		})
	}
	if err := consistent(run); err != nil {
		return Record{}, corrupt("%w", err)
	}
	if h.EventCount < 0 {
		return Record{}, corrupt("event_count %d is negative", h.EventCount)
	}
	return Record{Run: run, Version: h.Version, Lease: h.Lease.lease(), LastEventID: h.LastEventID, EventCount: uint64(h.EventCount)}, nil
}

// consistent checks that the context has what its state needs, so that a
// damaged document is refused instead of resumed with parts missing.
func consistent(r statemachine.Run) error {
	if r.Instruction == "" {
		return errors.New("context has no instruction")
	}
	needPlan := r.State != statemachine.Planning && r.State != statemachine.Stopped && r.State != statemachine.Error
	if needPlan && r.Target() < 1 {
		return fmt.Errorf("state %s needs an accepted plan, the context has none", r.State)
	}
	switch r.State {
	case statemachine.AwaitingFetchApproval:
		if len(r.FetchedIDs) == 0 {
			return fmt.Errorf("state %s needs fetched ids, the context has none", r.State)
		}
	case statemachine.Classifying:
		if len(r.BatchIDs) == 0 {
			return fmt.Errorf("state %s needs a batch, the context has none", r.State)
		}
	case statemachine.AwaitingBatchApproval, statemachine.Saving:
		if len(r.PendingBatch) == 0 || len(r.PendingBatch) != len(r.BatchIDs) {
			return fmt.Errorf("state %s needs a classified batch, the context has %d classifications for %d ids", r.State, len(r.PendingBatch), len(r.BatchIDs))
		}
		for _, c := range r.PendingBatch {
			if !c.Label.Valid() {
				return fmt.Errorf("pending classification of %q has label %q", c.ConversationID, c.Label)
			}
		}
	}
	if r.ModelCalls < 0 || r.Resolved < 0 || r.Unresolved < 0 || r.Resolved+r.Unresolved != len(r.LabelledIDs) {
		return fmt.Errorf("counters do not add up: %d resolved + %d unresolved for %d labelled", r.Resolved, r.Unresolved, len(r.LabelledIDs))
	}
	return nil
}
