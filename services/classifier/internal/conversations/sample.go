package conversations

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// sampleJSONL holds 40 realistic customer-service conversations (billing,
// shipping, account, technical), some resolved and some not, in the import
// format.
//
//go:embed sample.jsonl
var sampleJSONL []byte

// Sample returns the embedded sample conversations.
func Sample() ([]Conversation, error) {
	parsed, rejected, err := ParseJSONL(bytes.NewReader(sampleJSONL), map[string]int{})
	if err != nil {
		return nil, fmt.Errorf("conversations: sample: %w", err)
	}
	if len(rejected) > 0 {
		return nil, fmt.Errorf("conversations: sample line %d: %s", rejected[0].Line, rejected[0].Reason)
	}
	out := make([]Conversation, len(parsed))
	for i, p := range parsed {
		out[i] = p.Conversation
	}
	return out, nil
}

// LoadSample stores the sample conversations in scope if the scope holds no
// conversation yet, and returns how many it stored (0 when it left an
// existing collection alone).
func (s *Store) LoadSample(ctx context.Context, scope *commonv1.Scope) (int, error) {
	n, err := s.Count(ctx, scope)
	if err != nil {
		return 0, err
	}
	if n > 0 {
		return 0, nil
	}
	convs, err := Sample()
	if err != nil {
		return 0, err
	}
	return s.Upsert(ctx, scope, convs)
}
