package classifycli_test

import (
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
)

// protojsonMarshal writes a conversation as one JSON Lines line.
func protojsonMarshal(c conversations.Conversation) ([]byte, error) {
	return protojson.MarshalOptions{Multiline: false}.Marshal(c.Proto())
}
