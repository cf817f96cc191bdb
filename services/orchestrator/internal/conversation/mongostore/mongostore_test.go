package mongostore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
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
				connect := func() conversation.Store { return connect(t, uri, dbName, single) }
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

// connect opens a Store on database dbName at uri with a client of its
// own, as another process would; single declares it the only writer.
func connect(t *testing.T, uri, dbName string, single bool) conversation.Store {
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

// TestSingleWriterTakesADeadProcesssLease: a process killed mid-turn
// leaves the turn's lease in the database (one that wrote its leases: a
// replica, or an earlier version of agentmesh up); a process started after
// it as the database's only writer knows that lease is no turn's, and the
// conversation takes a message at once, not when the lease lapses. Its own
// leases live in memory (none is written) and still hold against its own
// turns and deletes, and many writers still wait for any lease another
// holds.
func TestSingleWriterTakesADeadProcesssLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	uri, dbName := testkit.MongoURI(t)
	open := func(single bool) conversation.Store { return connect(t, uri, dbName, single) }
	sc := conversation.Scope{TenantID: "acme"}
	t0 := time.Now()
	lease := func(id string) conversation.Lease {
		return conversation.Lease{ID: id, Holder: "orchestrator", Until: t0.Add(30 * time.Second)}
	}
	killed := open(false)
	if err := killed.Create(ctx, &conversation.Conversation{ID: "c1", Scope: sc, CreateTime: t0, UpdateTime: t0}); err != nil {
		t.Fatal(err)
	}
	if _, err := killed.AcquireLease(ctx, sc, "c1", lease("turn-of-the-killed-process"), t0); err != nil {
		t.Fatal(err)
	}
	msg := conversation.Message{ID: "m1", Seq: 1, Role: conversation.RoleUser, Content: "m1", CreateTime: t0}
	if err := killed.Append(ctx, sc, "c1", msg); err != nil {
		t.Fatal(err)
	}
	leaseDocs := func() int64 {
		t.Helper()
		client, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = client.Disconnect(ctx) }()
		n, err := client.Database(dbName).Collection(mongostore.LeasesCollection).CountDocuments(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	if _, err := open(false).AcquireLease(ctx, sc, "c1", lease("replica"), t0.Add(time.Second)); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("many writers, a lease another holds: %v, want ErrBusy", err)
	}

	restarted := open(true)
	if c, err := restarted.Get(ctx, sc, "c1"); err != nil || c.Lease.Held(t0.Add(time.Second)) {
		t.Fatalf("Get after the restart = %+v, %v; want the dead turn's lease not held", c, err)
	}
	got, err := restarted.AcquireLease(ctx, sc, "c1", lease("next"), t0.Add(time.Second))
	if err != nil {
		t.Fatalf("taking the killed process's lease: %v, want it taken at once", err)
	}
	if got.Lease.ID != "next" {
		t.Fatalf("lease = %+v, want next", got.Lease)
	}
	if n := leaseDocs(); n != 1 {
		t.Errorf("%d lease documents after the single writer's lease; want the killed process's alone", n)
	}
	if msgs, err := restarted.Messages(ctx, sc, "c1", 10); err != nil || len(msgs) != 1 || msgs[0].Content != "m1" {
		t.Fatalf("messages after the takeover = %+v, %v; want m1", msgs, err)
	}
	if _, err := restarted.AcquireLease(ctx, sc, "c1", lease("second turn"), t0.Add(2*time.Second)); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("a second turn beside this process's own: %v, want ErrBusy", err)
	}
	if err := restarted.Delete(ctx, sc, "c1", t0.Add(2*time.Second)); !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("a delete beside this process's own turn: %v, want ErrBusy", err)
	}
	if err := restarted.ReleaseLease(ctx, sc, "c1", got.Lease, t0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := restarted.Delete(ctx, sc, "c1", t0.Add(3*time.Second)); err != nil {
		t.Fatalf("delete after the release: %v", err)
	}
}
