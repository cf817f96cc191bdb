package mongox_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestCutReadsLeaveNoCursors: clients whose reads of many documents are
// cut by their deadlines at every point (before the first reply, during
// it, between replies, in a getMore), for seconds, leave the embedded
// FerretDB no cursor, and answering at once. FerretDB keeps a cursor, and
// one of its 100 SQLite connections with it, until the cursor is killed
// or the connection that opened it closes: with the deadline passed to the
// driver (which keeps a connection a deadline cut) and the cursor closed
// under the cut context, all 100 connections stayed held by cursors and
// a find after the cuts went unanswered for 10 s.
//
// Not parallel: it counts every FerretDB cursor of the process.
func TestCutReadsLeaveNoCursors(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts reads for seconds")
	}
	coll := padded(t, "many", 2500)
	var (
		mu       sync.Mutex
		outcomes = map[string]int{}
		most     int
		stop     = make(chan struct{})
		sampled  = make(chan struct{})
	)
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			most = max(most, liveCursors(t))
		}
	}()
	// Cuts up to twice an uncut read's time, in rounds until some landed
	// before the first document and some within the results.
	began := time.Now()
	if out, err := findAll(context.Background(), coll, bson.M{"v": bson.M{"$gte": 0}}); err != nil || len(out) != 2500 {
		t.Fatalf("an uncut read: %d documents, %v", len(out), err)
	}
	whole := time.Since(began)
	for round := 0; round < 8 && (round < 3 || outcomes["cut after some documents"] == 0 || outcomes["cut before the first document"] == 0); round++ {
		cutRepeatedly(2*time.Second, 4, 2*whole, func(c context.Context) {
			out, err := findAll(c, coll, bson.M{"v": bson.M{"$gte": 0}})
			outcome := "read whole"
			switch {
			case err != nil && len(out) == 0:
				outcome = "cut before the first document"
			case err != nil:
				outcome = "cut after some documents"
			case len(out) != 2500:
				outcome = fmt.Sprintf("read %d documents", len(out))
			}
			mu.Lock()
			outcomes[outcome]++
			mu.Unlock()
		})
	}
	close(stop)
	<-sampled
	t.Logf("an uncut read took %v; cut reads: %v; at most %d cursors open during the cuts", whole, outcomes, most)
	if most == 0 {
		t.Fatal("no FerretDB cursor seen during the reads: liveCursors no longer finds them")
	}
	if outcomes["cut after some documents"] == 0 || outcomes["cut before the first document"] == 0 {
		t.Fatalf("the cuts did not land both before and within the results: %v", outcomes)
	}
	left := -1
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = liveCursors(t); left == 0 {
			break
		}
	}
	if left != 0 {
		t.Errorf("%d FerretDB cursors left 5 s after the cut reads", left)
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := findAll(c, coll, bson.M{"v": bson.M{"$lt": 300}})
	if err != nil || len(out) != 300 {
		t.Fatalf("a find after the cut ones: %d documents, %v; want 300 within 10 s", len(out), err)
	}
}

// goroutines is a goroutine profile group's count (pprof's debug=1 form).
var goroutines = regexp.MustCompile(`(?m)^(\d+) @ `)

// liveCursors counts the cursors of the embedded FerretDB servers of this
// process: each has a goroutine in the cursor registry until it closes.
func liveCursors(t *testing.T) int {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, group := range strings.Split(b.String(), "\n\n") {
		if !strings.Contains(group, "cursor.(*Registry).NewCursor.func1") {
			continue
		}
		m := goroutines.FindStringSubmatch(group)
		if m == nil {
			t.Fatalf("goroutine profile: no count in %q", group[:min(len(group), 80)])
		}
		count, _ := strconv.Atoi(m[1])
		n += count
	}
	return n
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
	cut := cutRepeatedly(8*time.Second, 6, 3*time.Millisecond, func(c context.Context) {
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

// findAll reads every document of coll that filter matches (those read
// before an error, with the error).
func findAll(ctx context.Context, coll *mongo.Collection, filter any) ([]bson.M, error) {
	var out []bson.M
	err := mongox.FindAll(ctx, coll, filter, &out)
	return out, err
}

// cutRepeatedly calls op from workers goroutines for d, each call under a
// context whose deadline comes after a random time up to most, and returns
// how many calls it made.
func cutRepeatedly(d time.Duration, workers int, most time.Duration, op func(ctx context.Context)) int {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		calls int
	)
	until := time.Now().Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(until) {
				c, cancel := context.WithTimeout(context.Background(), rand.N(most))
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
// with the driver's Find or Aggregate directly (see mongox.FindAll).
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
						t.Errorf("%s:%d: %s.%s: query through mongox.%[4]sAll", path, i+1, m[1], m[3])
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
