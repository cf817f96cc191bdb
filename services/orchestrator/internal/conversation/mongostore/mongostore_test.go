package mongostore_test

import (
	"context"
	"errors"
	"fmt"
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

// TestDeletionLog: a delete is recorded until the conversation's turn
// events are gone too (Forgotten), and FinishDeletions finishes the deletes
// left recorded: a failed purge of the events (tried again until it
// succeeds), a crash after the conversation document went (its messages,
// window and leases deleted then), never a delete that may still be under
// way (a younger record), and not a delete that failed before the
// conversation went (its record dropped, the conversation kept). With many
// writers an index serves each of its queries.
func TestDeletionLog(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		t.Cleanup(func() {
			if !mongox.SingleWriter(db) {
				testkit.AssertIndexed(t, db, rt)
			}
		})
		ctx := context.Background()
		s, err := mongostore.New(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		sc := conversation.Scope{TenantID: "acme", ProjectID: "p"}
		t0 := time.Now().UTC().Truncate(time.Millisecond)
		create := func(id string) {
			t.Helper()
			if err := s.Create(ctx, &conversation.Conversation{ID: id, Scope: sc, CreateTime: t0, UpdateTime: t0}); err != nil {
				t.Fatal(err)
			}
			l, err := s.AcquireLease(ctx, sc, id, conversation.Lease{ID: "turn-" + id, Holder: "test", Until: t0.Add(time.Minute)}, t0)
			if err != nil {
				t.Fatal(err)
			}
			for seq := int64(1); seq <= 3; seq++ {
				m := conversation.Message{ID: id + "-m", Seq: seq, Role: conversation.RoleUser, Content: "hello", CreateTime: t0}
				if err := s.Append(ctx, sc, id, m); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.ReleaseLease(ctx, sc, id, l.Lease, t0); err != nil {
				t.Fatal(err)
			}
		}
		left := func(id string) (n int64) {
			t.Helper()
			for _, coll := range []string{mongostore.MessagesCollection, mongostore.LeasesCollection} {
				c, err := db.Collection(coll).CountDocuments(ctx, bson.D{{Key: "conversation_id", Value: id}})
				if err != nil {
					t.Fatal(err)
				}
				n += c
			}
			return n
		}
		var forgot []conversation.Deletion
		var refuse error
		forget := func(_ context.Context, d conversation.Deletion) error {
			if refuse != nil {
				return refuse
			}
			forgot = append(forgot, d)
			return nil
		}
		finish := func(at time.Time) int {
			t.Helper()
			forgot = nil
			n, err := s.FinishDeletions(ctx, at, forget)
			if (err != nil) != (refuse != nil) {
				t.Fatalf("FinishDeletions: %v (the events' purge failing: %v)", err, refuse)
			}
			return n
		}
		later := t0.Add(2 * time.Minute)

		// A delete whose events could not be purged: recorded until they are.
		create("c1")
		if err := s.Delete(ctx, sc, "c1", t0); err != nil {
			t.Fatal(err)
		}
		if n := finish(t0.Add(time.Second)); n != 0 || len(forgot) != 0 {
			t.Fatalf("FinishDeletions right after the delete finished %d, forgot %v: a delete under way is not its business", n, forgot)
		}
		refuse = errors.New("stream unavailable")
		finish(later)
		refuse = nil
		if n := finish(later); n != 1 || len(forgot) != 1 || forgot[0] != (conversation.Deletion{Scope: sc, ID: "c1"}) {
			t.Fatalf("FinishDeletions after a failed purge finished %d, forgot %v; want c1 in scope %v", n, forgot, sc)
		}
		if n := finish(later); n != 0 || len(forgot) != 0 {
			t.Fatalf("FinishDeletions again finished %d, forgot %v: the record is gone", n, forgot)
		}

		// A delete whose events went at once leaves no record.
		create("c2")
		if err := s.Delete(ctx, sc, "c2", t0); err != nil {
			t.Fatal(err)
		}
		if err := s.Forgotten(ctx, "c2"); err != nil {
			t.Fatal(err)
		}
		if n := finish(later); n != 0 || len(forgot) != 0 {
			t.Fatalf("FinishDeletions after Forgotten finished %d, forgot %v", n, forgot)
		}

		// A process killed after the conversation document went: its
		// messages and leases are still stored.
		create("c3")
		rec := bson.D{{Key: "_id", Value: "c3"}, {Key: "tenant_id", Value: sc.TenantID}, {Key: "project_id", Value: sc.ProjectID},
			{Key: "lease_gen", Value: int64(2)}, {Key: "create_time", Value: t0}}
		if _, err := db.Collection(mongostore.DeletionsCollection).InsertOne(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Collection(mongostore.ConversationsCollection).DeleteOne(ctx, bson.D{{Key: "_id", Value: "c3"}}); err != nil {
			t.Fatal(err)
		}
		if left("c3") == 0 {
			t.Fatal("the cut delete left nothing to finish")
		}
		if n := finish(later); n != 1 || len(forgot) != 1 || forgot[0].ID != "c3" || left("c3") != 0 {
			t.Fatalf("after the cut delete, FinishDeletions finished %d, forgot %v, left %d messages and leases", n, forgot, left("c3"))
		}

		// A process killed while it deleted the messages: some are gone,
		// from the start too, while the window and the rest are still
		// stored. (A single writer finds the messages from the last
		// sequence its delete recorded.)
		create("c6")
		var c6 bson.Raw
		if err := s.Delete(ctx, sc, "c6", t0); err != nil {
			t.Fatal(err)
		}
		c6, err = db.Collection(mongostore.DeletionsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "c6"}}).Raw()
		if err != nil {
			t.Fatal(err)
		}
		// Put back what the cut delete had not removed yet: messages 2 and
		// 3 (not 1) and the window, with the record.
		for seq := int64(2); seq <= 3; seq++ {
			m := bson.D{{Key: "_id", Value: fmt.Sprintf("c6/%012d", seq)}, {Key: "conversation_id", Value: "c6"}, {Key: "seq", Value: seq},
				{Key: "role", Value: "user"}, {Key: "content", Value: "hello"}}
			if _, err := db.Collection(mongostore.MessagesCollection).InsertOne(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.Collection(mongostore.WindowsCollection).InsertOne(ctx, bson.D{{Key: "_id", Value: "c6"}}); err != nil {
			t.Fatal(err)
		}
		if n := left("c6"); n != 2 {
			t.Fatalf("the cut delete left %d messages and leases, want 2", n)
		}
		if n := finish(later); n != 1 || len(forgot) != 1 || forgot[0].ID != "c6" || left("c6") != 0 {
			t.Fatalf("after the delete cut among the messages (record %v), FinishDeletions finished %d, forgot %v, left %d messages and leases",
				c6, n, forgot, left("c6"))
		}

		// A delete that failed before the conversation went: kept whole.
		create("c4")
		rec[0].Value = "c4"
		if _, err := db.Collection(mongostore.DeletionsCollection).InsertOne(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if n := finish(later); n != 0 || len(forgot) != 0 {
			t.Fatalf("FinishDeletions of a delete that never removed its conversation finished %d, forgot %v", n, forgot)
		}
		if msgs, err := s.Messages(ctx, sc, "c4", 0); err != nil || len(msgs) != 3 {
			t.Fatalf("the kept conversation's messages: %d, %v", len(msgs), err)
		}
		for _, id := range []string{"c1", "c2", "c3", "c4"} {
			if err := db.Collection(mongostore.DeletionsCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err(); !errors.Is(err, mongo.ErrNoDocuments) {
				t.Errorf("the deletion record of %s: %v; want none left", id, err)
			}
		}
	})
}
