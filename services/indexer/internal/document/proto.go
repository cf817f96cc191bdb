package document

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/extract"
)

// Proto returns the scope as the contract's message.
func (s Scope) Proto() *commonv1.Scope {
	return &commonv1.Scope{TenantId: s.Tenant, ProjectId: s.Project}
}

// MaxRepeatedText is the longest raw content a response repeats as the
// pipeline's original text: twice a long text would push a response past
// gRPC's default 4 MiB limit.
const MaxRepeatedText = 1 << 20

// Proto returns the document as the contract's message; the raw content
// and the pipeline state only when withRaw is true.
func (d *Document) Proto(withRaw bool) *indexerv1.Document {
	p := &indexerv1.Document{
		Id: d.ID, Scope: d.Scope.Proto(), SourceType: d.SourceType, SourceUrl: d.SourceURL, Title: d.Title,
		ContentHash: d.ContentHash, ContentType: d.ContentType, ChunkCount: int32(d.ChunkCount),
		Routing: d.Routing, RoutingReason: d.RoutingReason, ExtractionJobId: d.ExtractionJobID,
		ExtractionStatus: d.ExtractionStatus, VisionSummary: d.VisionSummary,
	}
	p.LiftedJobId = d.LiftedJobID
	if withRaw {
		p.RawContent = d.RawContent
		if d.Pipeline != nil {
			// The state with what the record holds elsewhere: the
			// original text and the chunks' ids.
			p.Pipeline = proto.Clone(d.Pipeline).(*indexerv1.IntakePipeline)
			if len(d.RawContent) <= MaxRepeatedText {
				p.Pipeline.OriginalText = d.RawContent
			}
			if p.Pipeline.Indexing != nil {
				p.Pipeline.Indexing.ChunkIds = ChunkIDs(d.ID, d.Chunks())
			}
		}
	}
	if !d.CreateTime.IsZero() {
		p.CreateTime = timestamppb.New(d.CreateTime)
	}
	if !d.UpdateTime.IsZero() {
		p.UpdateTime = timestamppb.New(d.UpdateTime)
	}
	for _, e := range d.Extracts {
		p.Extracts = append(p.Extracts, ExtractProto(e))
	}
	return p
}

// ExtractProto returns an extract as the contract's message. Data that
// cannot become a Struct (it always can: extracts are JSON values) is
// dropped rather than failing the whole document.
func ExtractProto(e extract.Extract) *indexerv1.Extract {
	data, err := structpb.NewStruct(e.Data)
	if err != nil {
		data = nil
	}
	return &indexerv1.Extract{
		Type: e.Type, SchemaVersion: int32(e.SchemaVersion), Data: data, Confidence: e.Confidence,
		SpanStart: int64(e.SpanStart), SpanEnd: int64(e.SpanEnd), Extractor: e.Extractor,
	}
}

// Proto returns the job as the contract's message.
func (j *Job) Proto() *indexerv1.ExtractionJob {
	p := &indexerv1.ExtractionJob{
		Id: j.ID, Scope: j.Scope.Proto(), DocumentId: j.DocumentID, ContentHash: j.ContentHash, Reason: j.Reason,
		Status: j.Status, Attempts: int32(j.Attempts), Error: j.Error,
	}
	if !j.CreateTime.IsZero() {
		p.CreateTime = timestamppb.New(j.CreateTime)
	}
	if !j.StartTime.IsZero() {
		p.StartTime = timestamppb.New(j.StartTime)
	}
	if !j.EndTime.IsZero() {
		p.EndTime = timestamppb.New(j.EndTime)
	}
	for _, r := range j.Runs {
		p.ExtractorRuns = append(p.ExtractorRuns, &indexerv1.ExtractorRun{
			Extractor: r.Extractor, SchemaVersion: int32(r.SchemaVersion), Status: r.Status,
			ExtractCount: int32(r.ExtractCount), Error: r.Error, Duration: durationpb.New(r.Duration),
		})
	}
	return p
}
