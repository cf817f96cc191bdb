package mongostore_test

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/mongostore"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation/storetest"
)

// TestStore runs the store suite on the embedded FerretDB, in both writer
// modes. With many writers each Store the suite opens has a client of its
// own, as two replicas would; a single writer is one process with one
// Store.
func TestStore(t *testing.T) {
	t.Parallel()
	for _, single := range []bool{false, true} {
		name := "many writers"
		if single {
			name = "single writer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T) func() conversation.Store {
				uri, dbName := testkit.MongoURI(t)
				connect := func() conversation.Store {
					client, err := mongo.Connect(options.Client().ApplyURI(uri))
					if err != nil {
						t.Fatalf("connect: %v", err)
					}
					t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
					if single {
						mongox.MarkSingleWriter(client)
					}
					s, err := mongostore.New(context.Background(), client.Database(dbName))
					if err != nil {
						t.Fatalf("mongostore.New: %v", err)
					}
					return s
				}
				if !single {
					return connect
				}
				var once sync.Once
				var s conversation.Store
				return func() conversation.Store {
					once.Do(func() { s = connect() })
					return s
				}
			})
		})
	}
}

// TestEveryQueryIsIndexed runs the store suite with many writers (MongoDB
// in production) on databases whose commands are recorded, and checks that
// an index the store creates serves every query it sent
// (testkit.AssertIndexed): the listings by scope, with and without a
// caller and a page token, the reads of a long conversation's messages
// (a window of 2 makes most conversations of the suite long), and the
// deletes by conversation.
func TestEveryQueryIsIndexed(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) func() conversation.Store {
		db, rt := testkit.MongoDBCounted(t)
		t.Cleanup(func() { testkit.AssertIndexed(t, db, rt) })
		return func() conversation.Store {
			s, err := mongostore.New(context.Background(), db, mongostore.Options{RecentSize: 2})
			if err != nil {
				t.Fatalf("mongostore.New: %v", err)
			}
			return s
		}
	})
}
