package testkit_test

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestSerialWritesIsolatesVersionedUpdates races versioned updates
// ({_id, version} → version+1) from many clients, each its own
// connection pool as replicas are, through the relay: each version is
// taken by one update only, as on MongoDB, so the successes add up to the
// final version. Straight to FerretDB, two updates can match the same
// version and both report a match.
func TestSerialWritesIsolatesVersionedUpdates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	m, err := testkit.StartMongo(ctx, testkit.MongoOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Stop() }()
	u, err := url.Parse(m.URI())
	if err != nil {
		t.Fatal(err)
	}
	relay, err := testkit.StartSerialWrites(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	uri := "mongodb://" + relay.Addr() + "/"

	const clients, rounds = 8, 40
	colls := make([]*mongo.Collection, clients)
	for i := range colls {
		c, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(2 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(context.Background())
		colls[i] = c.Database("serial").Collection("docs")
	}
	if _, err := colls[0].InsertOne(ctx, bson.D{{Key: "_id", Value: "doc"}, {Key: "version", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	var won atomic.Int64
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func(coll *mongo.Collection) {
			defer wg.Done()
			for range rounds {
				var cur struct {
					Version int64 `bson:"version"`
				}
				if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Decode(&cur); err != nil {
					t.Error(err)
					return
				}
				res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: "doc"}, {Key: "version", Value: cur.Version}},
					bson.D{{Key: "$set", Value: bson.D{{Key: "version", Value: cur.Version + 1}}}})
				if err != nil {
					t.Error(err)
					return
				}
				won.Add(res.MatchedCount)
			}
		}(colls[i])
	}
	wg.Wait()
	var final struct {
		Version int64 `bson:"version"`
	}
	if err := colls[0].FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Decode(&final); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d updates matched, final version %d", won.Load(), final.Version)
	if won.Load() != final.Version {
		t.Fatalf("%d updates matched a version but the document is at version %d: two updates took the same version", won.Load(), final.Version)
	}
	if final.Version == 0 {
		t.Fatal("no update matched")
	}

	// The backend going away closes the relayed connections; started
	// again, it is reached through the relay as before.
	m.Stop()
	if err := colls[0].FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Err(); err == nil {
		t.Fatal("a read succeeded with the backend stopped")
	}
	m, err = testkit.StartMongo(ctx, testkit.MongoOptions{Dir: dir, Addr: u.Host})
	if err != nil {
		t.Fatal(err)
	}
	if err := colls[0].FindOne(ctx, bson.D{{Key: "_id", Value: "doc"}}).Decode(&final); err != nil {
		t.Fatalf("reading through the relay after the backend restarted: %v", err)
	}
	if won.Load() != final.Version {
		t.Fatalf("version %d after the restart, want %d", final.Version, won.Load())
	}
}
