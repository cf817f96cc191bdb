package mongostore

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/graph"
)

// TestEveryQueryIsIndexed runs the walks and the cleanup with many writers
// (MongoDB) on a database whose commands are recorded, and a read of more
// nodes than are read one by one: an index the store creates at start
// serves every query (testkit.AssertIndexed).
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	db, rt := testkit.MongoDBCounted(t)
	testWalksAndCleanup(t, db)
	keys := make([]string, maxNodeLookups+1)
	for i := range keys {
		keys[i] = fmt.Sprintf("entity:n:%d", i)
	}
	if _, err := New(db).Nodes(context.Background(), graph.Scope{Tenant: "acme"}, keys); err != nil {
		t.Fatal(err)
	}
	testkit.AssertIndexed(t, db, rt)
}
