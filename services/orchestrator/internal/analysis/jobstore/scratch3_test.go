package jobstore

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

func TestScratchOps(t *testing.T) {
	db := testkit.MongoDB(t)
	ctx := context.Background()
	s, err := New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	c := s.coll
	n := 0
	for _, target := range []int{10, 1000, 3000} {
		for ; n < target; n++ {
			if err := s.Insert(ctx, mkJob(n)); err != nil {
				t.Fatal(err)
			}
		}
		id := mkJob(n - 1).ID
		tm := func(name string, f func()) {
			start := time.Now()
			for i := 0; i < 20; i++ {
				f()
			}
			t.Logf("n=%d %s %v", target, name, time.Since(start)/20)
		}
		tm("findone", func() {
			var j analysis.Job
			if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(&j); err != nil {
				t.Fatal(err)
			}
		})
		tm("findone-proj", func() {
			var j analysis.Job
			if err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(bson.D{{Key: "version", Value: 1}})).Decode(&j); err != nil {
				t.Fatal(err)
			}
		})
		tm("update-small", func() {
			if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.M{"$set": bson.M{"status": "x"}}); err != nil {
				t.Fatal(err)
			}
		})
		tm("update-inc", func() {
			if _, err := c.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, bson.M{"$inc": bson.M{"version": 1}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}
