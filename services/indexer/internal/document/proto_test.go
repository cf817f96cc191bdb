package document

import (
	"strings"
	"testing"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// The pipeline's original text repeats the raw content up to
// MaxRepeatedText; its chunk ids are the document's current chunks.
func TestProtoPipeline(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		size     int
		repeated bool
	}{{"small", 10, true}, {"at the limit", MaxRepeatedText, true}, {"past it", MaxRepeatedText + 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			raw := strings.Repeat("x", tc.size)
			d := &Document{ID: "doc_1", RawContent: raw, ContentHash: Hash(raw), ChunkCount: 3,
				Pipeline: &indexerv1.IntakePipeline{Indexing: &indexerv1.IntakeIndexing{ChunkCount: 3}}}
			p := d.Proto(true).GetPipeline()
			if got := p.GetOriginalText() == raw; got != tc.repeated {
				t.Errorf("original text repeated: %v, want %v", got, tc.repeated)
			}
			if ids := p.GetIndexing().GetChunkIds(); len(ids) != 3 || ids[2] != ChunkID("doc_1", d.ContentHash, 2) {
				t.Errorf("chunk ids %v", ids)
			}
			if d.Proto(false).GetPipeline() != nil || d.Pipeline.GetOriginalText() != "" {
				t.Error("a listing carries the pipeline, or the stored state was changed")
			}
		})
	}
}
