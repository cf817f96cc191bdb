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
	"go.mongodb.org/mongo-driver/v2/mongo"

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
	coll := padded(t, "many", 400)
	cutRepeatedly(3*time.Second, 4, func(c context.Context) {
		_, _ = findAll(c, coll, bson.M{"v": bson.M{"$gte": 0}})
	})
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := findAll(c, coll, bson.M{"v": bson.M{"$lt": 300}})
	if err != nil || len(out) != 300 {
		t.Fatalf("a find after the cut ones: %d documents, %v; want 300 within 10 s", len(out), err)
	}
}

// TestCutCommandsLeaveTheStoreWritable: finds and findAndModify commands
// cut by their deadlines at every point, for seconds, beside writes, leave
// the embedded FerretDB writable. The driver sends a context's deadline as
// maxTimeMS, on which FerretDB cancels the command's SQLite statement;
// modernc.org/sqlite before v1.62 could deliver that interrupt to the
// connection's next statement and leave the pooled connection answering
// "interrupted" to everything, its write lock held: from then on every
// write failed ("interrupted (9)", "database is locked") until the process
// restarted (the first failed 1.5–3.4 s into the cuts, every run).
func TestCutCommandsLeaveTheStoreWritable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cuts commands for seconds")
	}
	ctx := context.Background()
	const n = 300
	coll := padded(t, "cut", n)
	write := func(timeout time.Duration) error {
		c, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := coll.UpdateOne(c, bson.M{"_id": fmt.Sprint(rand.IntN(n))}, bson.M{"$inc": bson.M{"w": 1}})
		return err
	}
	var (
		mu     sync.Mutex
		failed []error
		writes int
		stop   = make(chan struct{})
		wg     sync.WaitGroup
	)
	start := time.Now()
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := write(5 * time.Second)
				mu.Lock()
				writes++
				if err != nil {
					if len(failed) == 0 {
						t.Logf("first failed write %v after the cuts began", time.Since(start).Round(time.Millisecond))
					}
					failed = append(failed, err)
				}
				mu.Unlock()
			}
		})
	}
	cut := cutRepeatedly(8*time.Second, 6, func(c context.Context) {
		if rand.IntN(2) == 0 {
			_ = coll.FindOneAndUpdate(c, bson.M{"_id": fmt.Sprint(rand.IntN(n))}, bson.M{"$inc": bson.M{"f": 1}}).Err()
			return
		}
		_, _ = findAll(c, coll, bson.M{"v": bson.M{"$gte": rand.IntN(n)}})
	})
	close(stop)
	wg.Wait()
	t.Logf("%d commands cut, %d writes beside them", cut, writes)
	if len(failed) > 0 {
		t.Errorf("%d of %d writes beside the cut commands failed, first: %v", len(failed), writes, failed[0])
	}
	for range 10 {
		if err := write(10 * time.Second); err != nil {
			t.Fatalf("a write after the cut commands: %v", err)
		}
	}
}

// padded returns collection name of a database of the test's own, holding
// n documents with _id "0"… and v 0…n-1, each padded to ~150 bytes.
func padded(t *testing.T, name string, n int) *mongo.Collection {
	t.Helper()
	coll := testkit.MongoDB(t).Collection(name)
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.M{"_id": fmt.Sprint(i), "v": i, "pad": fmt.Sprintf("%0100d", i)}
	}
	if _, err := coll.InsertMany(context.Background(), docs); err != nil {
		t.Fatal(err)
	}
	return coll
}

// findAll reads every document of coll that filter matches.
func findAll(ctx context.Context, coll *mongo.Collection, filter any) ([]bson.M, error) {
	cur, err := mongox.Find(ctx, coll, filter)
	if err != nil {
		return nil, err
	}
	var out []bson.M
	err = cur.All(ctx, &out)
	return out, err
}

// cutRepeatedly calls op from workers goroutines for d, each call under a
// context whose deadline comes after a random time up to 3 ms, and returns
// how many calls it made.
func cutRepeatedly(d time.Duration, workers int, op func(ctx context.Context)) int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calls int
	)
	until := time.Now().Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(until) {
				c, cancel := context.WithTimeout(context.Background(), time.Duration(rand.IntN(3000))*time.Microsecond)
				op(c)
				cancel()
				mu.Lock()
				calls++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return calls
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
