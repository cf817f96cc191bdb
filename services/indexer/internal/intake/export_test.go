package intake

import (
	"context"

	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// SetAfterSave makes every ingest of s call f after its first write (the
// document saved, nothing indexed) and end with f's error: as if the
// process were killed there. nil removes it.
func SetAfterSave(s *Service, f func(docID string) error) { s.afterSave = f }

// SetBeforeRemove makes every delete of s call f before it removes the
// document's record, and end with f's error. nil removes it.
func SetBeforeRemove(s *Service, f func(docID string) error) { s.beforeRemove = f }

// ClaimKey is the claim key of extraction job id.
func ClaimKey(id string) string { return claimKey(id) }

// SingleWriter reports whether s is its database's only writer.
func (s *Service) SingleWriter() bool { return s.local }

// ErrIngestUnfinished is what an extraction gets when its document's ingest
// died before the end.
var ErrIngestUnfinished = errIngestUnfinished

// AwaitIngest waits, as an extraction job does, while the ingest of doc
// may be under way.
func AwaitIngest(ctx context.Context, s *Service, doc *document.Document) error {
	_, err := s.awaitIngest(ctx, doc)
	return err
}
