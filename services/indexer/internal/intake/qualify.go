package intake

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/agentmesh/agentmesh/libs/events"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
	"github.com/agentmesh/agentmesh/services/indexer/internal/routing"
)

// Intake events: am.evt.<tenant>.intake.<document id>.<phase> for each
// phase (pipeline.Phase*), and .finished once routing is recorded.
const (
	intakeDomain        = "intake"
	EventIntakeFinished = "finished"
)

// timedPhase times one phase that package intake runs (indexing,
// routing).
type timedPhase struct {
	s     *Service
	p     *indexerv1.IntakePhase
	began time.Time
}

func (s *Service) qualifierPhase(name string) *timedPhase {
	return &timedPhase{s: s, p: &indexerv1.IntakePhase{Name: name}, began: s.Now()}
}

// end records the phase on p, if any, and returns it.
func (t *timedPhase) end(p *indexerv1.IntakePipeline) *indexerv1.IntakePhase {
	t.p.Duration = durationpb.New(t.s.Now().Sub(t.began))
	if p != nil {
		p.Phases = append(p.Phases, t.p)
	}
	return t.p
}

// phaseEvents are the outbox entries announcing phases of doc's pipeline,
// under the intake's correlation id, with ids derived from key (the
// correlation id, or the extraction job's id for the phases a job runs),
// so a retried write publishes each once.
func (s *Service) phaseEvents(ctx context.Context, doc *document.Document, correlation, key string, phases ...*indexerv1.IntakePhase) ([]events.OutboxEntry, error) {
	snapshot := pipeline.ForEvent(doc.Pipeline)
	out := make([]events.OutboxEntry, 0, len(phases))
	for _, ph := range phases {
		e, err := outboxEvent(ctx, doc.Scope, intakeDomain, doc.ID, ph.GetName(), correlation, ":"+key,
			&indexerv1.IntakePhaseEvent{DocumentId: doc.ID, Phase: ph, Pipeline: snapshot})
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// finishedEvent announces the end of doc's pipeline; correlation and key
// as for phaseEvents.
func (s *Service) finishedEvent(ctx context.Context, doc *document.Document, correlation, key string, last *indexerv1.IntakePhase) (events.OutboxEntry, error) {
	return outboxEvent(ctx, doc.Scope, intakeDomain, doc.ID, EventIntakeFinished, correlation, ":"+key,
		&indexerv1.IntakePhaseEvent{DocumentId: doc.ID, Phase: last, Pipeline: pipeline.ForEvent(doc.Pipeline)})
}

// route decides DONE or LIFT_UP. The rules go first, and decide the
// obvious cases: when one lifts (an open urgent ticket, a log with
// errors, an e-mail asking to act, action items), that is the decision.
// Otherwise the model is offered the route_task tool; an answer without
// the tool call is DONE with a warning, a failed call DONE with the
// error recorded on the phase. The pipeline always gets a decision.
func (s *Service) route(ctx context.Context, doc *document.Document, exs []extract.Extract) (*indexerv1.IntakeRouting, *indexerv1.IntakePhase) {
	ph := s.qualifierPhase(pipeline.PhaseRouting)
	text := doc.RawContent
	if body := doc.Pipeline.GetExtraction().GetEmail().GetBody(); body != "" {
		text = body // what the sender wrote, not the MIME encoding of it
	}
	dec := routing.Decide(routing.Input{ContentType: doc.ContentType, Title: doc.Title, Text: text, Extracts: exs})
	r := &indexerv1.IntakeRouting{Routing: dec.Routing, Reason: dec.Reason, DecidedBy: indexerv1.DecidedBy_DECIDED_BY_RULES}
	if dec.Routing != indexerv1.Routing_ROUTING_LIFT_UP {
		decision, reason, called, tokens, err := s.Models.Route(ctx, routingSummary(doc, exs))
		ph.p.Tokens = tokens
		switch {
		case errors.Is(err, pipeline.ErrNoModel):
			r.Warning = "no routing model is configured: the rules decided"
		case err != nil:
			ph.p.Errors = append(ph.p.Errors, "routing model: "+err.Error())
			r.Routing, r.DecidedBy = indexerv1.Routing_ROUTING_DONE, indexerv1.DecidedBy_DECIDED_BY_FALLBACK
			r.Reason = "the routing model failed: DONE by default"
		case !called:
			r.Routing, r.DecidedBy = indexerv1.Routing_ROUTING_DONE, indexerv1.DecidedBy_DECIDED_BY_FALLBACK
			r.Reason, r.Warning = "the model did not call route_task: DONE by default", "the model did not call route_task"
		default:
			r.Routing, r.Reason, r.DecidedBy = decision, reason, indexerv1.DecidedBy_DECIDED_BY_MODEL
		}
	}
	if r.Routing == indexerv1.Routing_ROUTING_LIFT_UP {
		r.LiftedJobId = LiftedJobID(doc.ID, doc.ContentHash)
	}
	return r, ph.end(doc.Pipeline)
}

// routingSummary is what the routing model reads: the pipeline's
// findings and the start of the text.
func routingSummary(doc *document.Document, exs []extract.Extract) string {
	p := doc.Pipeline
	var b strings.Builder
	fmt.Fprintf(&b, "Title: %s\nContent type: %s (%s)\n", doc.Title,
		strings.TrimPrefix(p.GetContentType().GetType().String(), "INTAKE_CONTENT_TYPE_"), doc.ContentType)
	if info := p.GetIndexing().GetBaseInfo(); info != "" {
		fmt.Fprintf(&b, "Base node %s: %s\n", p.GetIndexing().GetBaseNodeKey(), info)
	}
	fmt.Fprintf(&b, "Chunks indexed: %d\n", doc.ChunkCount)
	if v := p.GetVision(); v.GetGeneralSummary() != "" {
		fmt.Fprintf(&b, "Images: %s %s\n", v.GetGeneralSummary(), v.GetTypeSpecificDetails())
	}
	if d := digest(exs); d != "" {
		fmt.Fprintf(&b, "Extracts:\n%s\n", d)
	}
	text := doc.RawContent
	if body := p.GetExtraction().GetEmail().GetBody(); body != "" {
		text = body
	}
	if l := p.GetExtraction().GetLog(); l != nil {
		text = l.GetSummary() + "\n" + strings.Join(l.GetCriticalDetails(), "\n")
	}
	r := []rune(text)
	if len(r) > 3000 {
		text = string(r[:3000]) + "…"
	}
	fmt.Fprintf(&b, "\nText:\n%s", text)
	return b.String()
}

// LiftedJobID names the analysis job that a LIFT_UP of one content
// version of a document hands it to: a UUID (the orchestrator's job id
// form) derived from the document id and content hash, so every
// extraction of that content, and every delivery of its lifted_up event,
// names the same job, and the orchestrator starts it once.
func LiftedJobID(docID, contentHash string) string {
	sum := sha256.Sum256([]byte("agentmesh/lifted-job\x00" + docID + "\x00" + contentHash))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80 // version 8: custom (RFC 9562 §5.8)
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
