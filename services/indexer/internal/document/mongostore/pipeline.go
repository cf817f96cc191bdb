package mongostore

import (
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// pipelineRecord is a document's qualifier state as stored: each part in
// the field of the write that records it, so a later phase's write
// cannot touch what an earlier phase found. Parts are protojson text,
// like extracts (extractRecord): they round-trip exactly.
//
//	state_json    SaveContent          task, attachments, vision, content type,
//	                                   extraction, indexing plan
//	phases_json   every write, $push   one entry per phase, in order
//	processed     MarkIndexedPipeline  chunks stored and linked
//	routing_json  CompleteExtraction   the routing decision
//	finished      CompleteExtraction   routing recorded: the pipeline ended
type pipelineRecord struct {
	StateJSON   string   `bson:"state_json"`
	PhasesJSON  []string `bson:"phases_json"`
	Processed   int      `bson:"processed"`
	RoutingJSON string   `bson:"routing_json,omitempty"`
	Finished    bool     `bson:"finished"`
}

// Fields of the pipeline record that later writes set, by path.
const (
	pipelinePhases    = "pipeline.phases_json"
	pipelineProcessed = "pipeline.processed"
	pipelineRouting   = "pipeline.routing_json"
	pipelineFinished  = "pipeline.finished"
)

// toPipelineRecord splits a state for SaveContent: the phases apart,
// and none of what later writes record (processed count, routing).
// A document without a state gets an empty record, so later writes can
// set its fields by path.
func toPipelineRecord(p *indexerv1.IntakePipeline) (*pipelineRecord, error) {
	if p == nil {
		return &pipelineRecord{PhasesJSON: []string{}}, nil
	}
	state := proto.Clone(p).(*indexerv1.IntakePipeline)
	phases := state.Phases
	state.Phases, state.Routing, state.Finished, state.OriginalText = nil, nil, false, ""
	if state.Indexing != nil {
		state.Indexing.ProcessedCount, state.Indexing.ChunkIds = 0, nil
	}
	b, err := protojson.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("mongostore: pipeline state: %w", err)
	}
	r := &pipelineRecord{StateJSON: string(b), PhasesJSON: []string{}}
	for _, ph := range phases {
		s, err := phaseJSON(ph)
		if err != nil {
			return nil, err
		}
		r.PhasesJSON = append(r.PhasesJSON, s)
	}
	return r, nil
}

func phaseJSON(ph *indexerv1.IntakePhase) (string, error) {
	b, err := protojson.Marshal(ph)
	if err != nil {
		return "", fmt.Errorf("mongostore: pipeline phase: %w", err)
	}
	return string(b), nil
}

// toPipeline joins the stored parts into the state.
func (r *pipelineRecord) toPipeline() (*indexerv1.IntakePipeline, error) {
	if r == nil || r.StateJSON == "" {
		return nil, nil
	}
	p := &indexerv1.IntakePipeline{}
	if err := protojson.Unmarshal([]byte(r.StateJSON), p); err != nil {
		return nil, fmt.Errorf("mongostore: pipeline state: %w", err)
	}
	for _, s := range r.PhasesJSON {
		ph := &indexerv1.IntakePhase{}
		if err := protojson.Unmarshal([]byte(s), ph); err != nil {
			return nil, fmt.Errorf("mongostore: pipeline phase: %w", err)
		}
		p.Phases = append(p.Phases, ph)
	}
	if p.Indexing == nil {
		p.Indexing = &indexerv1.IntakeIndexing{}
	}
	p.Indexing.ProcessedCount = int32(r.Processed)
	if r.RoutingJSON != "" {
		p.Routing = &indexerv1.IntakeRouting{}
		if err := protojson.Unmarshal([]byte(r.RoutingJSON), p.Routing); err != nil {
			return nil, fmt.Errorf("mongostore: pipeline routing: %w", err)
		}
	}
	p.Finished = r.Finished
	return p, nil
}

// PipelineProgress is what a write after SaveContent adds to the
// document's pipeline state.
type PipelineProgress struct {
	// Phase is the phase the write ends; nil adds none.
	Phase *indexerv1.IntakePhase
	// Processed, when positive, is the count of chunks stored and linked.
	Processed int
	// Routing, when set, is the routing decision; it finishes the pipeline.
	Routing *indexerv1.IntakeRouting
}

// apply adds the progress to an update.
func (pp PipelineProgress) apply(update bson.M) error {
	set, _ := update["$set"].(bson.M)
	if set == nil {
		set = bson.M{}
	}
	if pp.Processed > 0 {
		set[pipelineProcessed] = pp.Processed
	}
	if pp.Routing != nil {
		b, err := protojson.Marshal(pp.Routing)
		if err != nil {
			return fmt.Errorf("mongostore: pipeline routing: %w", err)
		}
		set[pipelineRouting], set[pipelineFinished] = string(b), true
	}
	if len(set) > 0 {
		update["$set"] = set
	}
	if pp.Phase != nil {
		s, err := phaseJSON(pp.Phase)
		if err != nil {
			return err
		}
		push, _ := update["$push"].(bson.M)
		if push == nil {
			push = bson.M{}
		}
		push[pipelinePhases] = s
		update["$push"] = push
	}
	return nil
}
