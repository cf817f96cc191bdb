package memstore_test

import (
	"testing"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/memstore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/storetest"
)

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) func() conversation.Store {
		s := memstore.New()
		return func() conversation.Store { return s }
	})
}
