package mongostore_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/storetest"
)

// TestStore runs the store suite on the embedded FerretDB. Each Store the
// suite opens has a client of its own, as two replicas would.
func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() conversation.Store {
		uri, dbName := testkit.MongoURI(t)
		return func() conversation.Store {
			client, err := mongo.Connect(options.Client().ApplyURI(uri))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
			s, err := mongostore.New(context.Background(), client.Database(dbName))
			if err != nil {
				t.Fatalf("mongostore.New: %v", err)
			}
			return s
		}
	})
}
