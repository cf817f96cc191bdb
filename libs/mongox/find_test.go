package mongox_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestCutFindsLeaveNoCursors: clients whose finds of many documents are
// cut by their contexts at every point, for seconds, leave the embedded
// FerretDB answering at once (with coll.Find's first batch of 101, each
// find cut while its reply was on the way kept a server cursor holding a
// SQLite connection, and after a few seconds of this no find was answered
// for minutes).
func TestCutFindsLeaveNoCursors(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cuts finds for seconds")
	}
	ctx := context.Background()
	coll := testkit.MongoDB(t).Collection("many")
	docs := make([]any, 400)
	for i := range docs {
		docs[i] = bson.M{"_id": fmt.Sprint(i), "v": i, "pad": fmt.Sprintf("%0100d", i)}
	}
	if _, err := coll.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	until := time.Now().Add(3 * time.Second)
	for range 4 {
		wg.Go(func() {
			for time.Now().Before(until) {
				c, cancel := context.WithTimeout(ctx, time.Duration(rand.IntN(3000))*time.Microsecond)
				cur, err := mongox.Find(c, coll, bson.M{"v": bson.M{"$gte": 0}})
				if err == nil {
					var out []bson.M
					_ = cur.All(c, &out)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cur, err := mongox.Find(c, coll, bson.M{"v": bson.M{"$lt": 300}})
	var out []bson.M
	if err == nil {
		err = cur.All(c, &out)
	}
	if err != nil || len(out) != 300 {
		t.Fatalf("a find after the cut ones: %d documents, %v; want 300 within 10 s", len(out), err)
	}
}

// TestQueriesGoThroughFind: no service or library queries a collection
// with the driver's Find or Aggregate directly (see mongox.Find).
func TestQueriesGoThroughFind(t *testing.T) {
	t.Parallel()
	direct := regexp.MustCompile(`\b(\w+(\.\w+)*)\.(Find|Aggregate)\(ctx, `)
	root := filepath.Join("..", "..")
	for _, dir := range []string{"libs", "services", "gateway", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				filepath.Base(path) == "find.go" && filepath.Base(filepath.Dir(path)) == "mongox" {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(b), "\n") {
				for _, m := range direct.FindAllStringSubmatch(line, -1) {
					if m[1] != "mongox" && !strings.HasSuffix(m[1], "Conversations") {
						t.Errorf("%s:%d: %s.%s: query through mongox.%[4]s", path, i+1, m[1], m[3])
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
