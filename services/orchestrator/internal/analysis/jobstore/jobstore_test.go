package jobstore_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/jobstore"
)

// relayed vouches for every outbox entry, as the engine does once the
// events are in the stream.
func relayed([]events.OutboxEntry) bool { return true }

// archiveOne archives one tree of jobs with s.Archive.
func archiveOne(ctx context.Context, s *jobstore.Store, relayed func([]events.OutboxEntry) bool, tree ...*analysis.Job) (bool, error) {
	done, err := s.Archive(ctx, [][]*analysis.Job{tree}, relayed)
	return done[0], err
}

func newJob(root, parent string, status analysis.Status, at time.Time) *analysis.Job {
	id := root
	typ := analysis.TypeAnalysis
	if parent != "" {
		id = uuid.NewString()
		typ = analysis.TypeTool
	}
	return &analysis.Job{
		ID: id, RootID: root, ParentID: parent, Type: typ, Status: status,
		Tenant: "acme", Project: "research", Title: "job " + id,
		CreateTime: at, UpdateTime: at,
	}
}

func openStore(t *testing.T, db *mongo.Database) *jobstore.Store {
	t.Helper()
	s, err := jobstore.New(context.Background(), db)
	if err != nil {
		t.Fatalf("jobstore.New: %v", err)
	}
	return s
}

func count(t *testing.T, db *mongo.Database, coll string) int64 {
	t.Helper()
	n, err := db.Collection(coll).CountDocuments(context.Background(), bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A finished tree leaves the live set for the archive and stays readable
// and listed once; writing to an archived job brings it back, and its live
// copy prevails — also over a restart.
func TestArchiveKeepsJobsReadableAndRevives(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testArchiveKeepsJobsReadableAndRevives)
}

func testArchiveKeepsJobsReadableAndRevives(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := openStore(t, db)
	now := time.Now().UTC().Truncate(time.Millisecond)

	root := newJob(uuid.NewString(), "", analysis.StatusComplete, now)
	tool := newJob(root.ID, root.ID, analysis.StatusFailed, now.Add(time.Millisecond))
	for _, j := range []*analysis.Job{root, tool} {
		if err := s.Insert(ctx, j); err != nil {
			t.Fatalf("Insert: %v", err)
		}
	}
	if err := s.Insert(ctx, tool); !errors.Is(err, analysis.ErrExists) {
		t.Fatalf("second Insert = %v, want ErrExists", err)
	}

	// Not while an entry is not vouched for, nor once a job changed.
	refuse := func([]events.OutboxEntry) bool { return false }
	if done, err := archiveOne(ctx, s, refuse, root, tool); done || err != nil {
		t.Fatalf("Archive with unrelayed events = %v, %v", done, err)
	}
	stale := *tool
	stale.Version = 7
	if done, err := archiveOne(ctx, s, relayed, root, &stale); done || err != nil {
		t.Fatalf("Archive of a changed job = %v, %v", done, err)
	}
	if n := count(t, db, jobstore.ArchiveCollection); n != 0 {
		t.Fatalf("%d jobs archived after refusals", n)
	}

	if s.Gone(root.ID) || s.Gone(tool.ID) {
		t.Fatal("Gone reports a live job")
	}
	if done, err := archiveOne(ctx, s, relayed, root, tool); !done || err != nil {
		t.Fatalf("Archive = %v, %v", done, err)
	}
	// The relay writes no removal of relayed entries to a job Gone
	// reports: only a single writer knows, from its mirror.
	if gone := s.Gone(tool.ID); gone != s.SoleWriter() {
		t.Errorf("Gone of an archived job = %v; want %v (single writer)", gone, s.SoleWriter())
	}
	if l, a := count(t, db, jobstore.Collection), count(t, db, jobstore.ArchiveCollection); l != 0 || a != 2 {
		t.Fatalf("live %d, archived %d; want 0 and 2", l, a)
	}
	live, err := s.Live(ctx, now.Add(time.Hour), "", 10)
	if err != nil || len(live) != 0 {
		t.Fatalf("Live = %v, %v; want nothing", live, err)
	}
	got, err := s.Get(ctx, "acme", "research", tool.ID)
	if err != nil || got.Status != analysis.StatusFailed {
		t.Fatalf("Get archived = %+v, %v", got, err)
	}
	if _, err := s.Get(ctx, "globex", "research", tool.ID); !errors.Is(err, analysis.ErrNotFound) {
		t.Fatalf("Get from another tenant = %v", err)
	}
	jobs, _, err := s.List(ctx, analysis.ListQuery{Tenant: "acme", Project: "research", Limit: 10})
	if err != nil || len(jobs) != 2 || jobs[0].ID != tool.ID || jobs[1].ID != root.ID {
		t.Fatalf("List = %v, %v; want the tool then the analysis", jobs, err)
	}

	// A retry: the failed tool is written again, and so comes back live.
	retried := *got
	retried.Status = analysis.StatusPending
	retried.UpdateTime = now.Add(time.Second)
	if err := s.Update(ctx, &retried, got.Version); err != nil {
		t.Fatalf("Update archived: %v", err)
	}
	if err := s.Update(ctx, &retried, got.Version); !errors.Is(err, analysis.ErrConflict) {
		t.Fatalf("Update at a stale version = %v, want ErrConflict", err)
	}
	if s.Gone(tool.ID) {
		t.Error("Gone reports a revived job")
	}
	for name, st := range map[string]*jobstore.Store{"same store": s, "reopened": openStore(t, db)} {
		got, err := st.Get(ctx, "acme", "research", tool.ID)
		if err != nil || got.Status != analysis.StatusPending || got.Version != retried.Version {
			t.Errorf("%s: Get revived = %+v, %v", name, got, err)
		}
		failed, _, err := st.List(ctx, analysis.ListQuery{Tenant: "acme", Project: "research", Status: analysis.StatusFailed, Limit: 10})
		if err != nil || len(failed) != 0 {
			t.Errorf("%s: failed jobs listed %v, %v; the archived copy must not show", name, failed, err)
		}
		all, _, err := st.List(ctx, analysis.ListQuery{Tenant: "acme", Project: "research", Limit: 1})
		if err != nil || len(all) != 1 || all[0].ID != tool.ID || all[0].Status != analysis.StatusPending {
			t.Errorf("%s: first page %v, %v", name, all, err)
		}
		live, err := st.Live(ctx, now.Add(time.Hour), "", 10)
		if err != nil || len(live) != 1 || live[0].ID != tool.ID {
			t.Errorf("%s: Live = %v, %v; want the revived tool", name, live, err)
		}
	}

	// Archived again, the new copy replaces the old one.
	if done, err := archiveOne(ctx, s, relayed, root, &retried); !done || err != nil {
		t.Fatalf("second Archive = %v, %v", done, err)
	}
	reopened := openStore(t, db)
	if got, err := reopened.Get(ctx, "acme", "research", tool.ID); err != nil || got.Status != analysis.StatusPending {
		t.Fatalf("Get after re-archiving = %+v, %v", got, err)
	}
	if _, err := reopened.Get(ctx, "acme", "research", uuid.NewString()); !errors.Is(err, analysis.ErrNotFound) {
		t.Fatalf("Get of an unknown job = %v", err)
	}
}

// Lapsed finds the running jobs whose claim ended, earliest first, and
// nothing else — from the store's writes (the single writer's mirror) and
// after a reopen; with many writers the live set has the index that
// serves the query.
func TestLapsedFindsRunningJobsWhoseClaimEnded(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testLapsedFindsRunningJobsWhoseClaimEnded)
}

func testLapsedFindsRunningJobsWhoseClaimEnded(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := openStore(t, db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	root := newJob(uuid.NewString(), "", analysis.StatusWaiting, now)
	job := func(status analysis.Status, lease time.Duration) *analysis.Job {
		j := newJob(root.ID, root.ID, status, now)
		if lease != 0 {
			j.LeaseOwner, j.LeaseUntil = "worker", new(now.Add(lease))
		}
		return j
	}
	lapsedLong := job(analysis.StatusRunning, -time.Minute)
	lapsedJust := job(analysis.StatusRunning, -time.Millisecond)
	for _, j := range []*analysis.Job{
		root, lapsedJust, lapsedLong,
		job(analysis.StatusRunning, time.Second),      // held
		job(analysis.StatusRunning, 0),                // no claim: not lapsed (never happens)
		job(analysis.StatusPending, 0),                // waiting for a worker
		job(analysis.StatusComplete, -time.Minute),    // finished (a claim is cleared then; it counts for nothing anyway)
		job(analysis.StatusCancelled, -time.Second*2), // cancelled while claimed
	} {
		if err := s.Insert(ctx, j); err != nil {
			t.Fatalf("Insert: %v", err)
		}
	}
	want := []string{lapsedLong.ID, lapsedJust.ID}
	for name, st := range map[string]*jobstore.Store{"same store": s, "reopened": openStore(t, db)} {
		got, err := st.Lapsed(ctx, now, 10)
		if err != nil {
			t.Fatalf("%s: Lapsed: %v", name, err)
		}
		var ids []string
		for _, j := range got {
			ids = append(ids, j.ID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s: Lapsed = %v, want %v (longest lapsed first)", name, ids, want)
		}
		if got, err := st.Lapsed(ctx, now, 1); err != nil || len(got) != 1 || got[0].ID != lapsedLong.ID {
			t.Errorf("%s: Lapsed with limit 1 = %v, %v", name, got, err)
		}
	}

	// Renewed, a claim is no longer lapsed.
	renewed := *lapsedJust
	renewed.LeaseUntil = new(now.Add(time.Second))
	if err := s.Update(ctx, &renewed, lapsedJust.Version); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lapsed(ctx, now, 10); err != nil || len(got) != 1 || got[0].ID != lapsedLong.ID {
		t.Errorf("Lapsed after a renewal = %v, %v; want only %s", got, err, lapsedLong.ID)
	}

	specs, err := db.Collection(jobstore.Collection).Indexes().ListSpecifications(ctx)
	if err != nil {
		t.Fatal(err)
	}
	indexed := slices.ContainsFunc(specs, func(s mongo.IndexSpecification) bool {
		return s.Name == "lapsed" && string(s.KeysDocument) == string(mustBSON(t, bson.D{{Key: "status", Value: 1}, {Key: "lease_until", Value: 1}}))
	})
	if single := mongox.SingleWriter(db); indexed == single {
		t.Errorf("index lapsed {status: 1, lease_until: 1} present: %v, with a single writer: %v; want it with many writers only", indexed, single)
	}
}

func mustBSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The writes of a job wait for the relay's removal of its published
// entries (RelayLock), but the writes of other jobs do not: a single
// writer's store once took one turn for every write of every job, and a
// submission's insert queued behind the steps of every analysis under way
// (the growth bench's first event: 42-55 ms at the median, 265-441 ms at
// p99, against 8-9 and 63-126 ms without it).
func TestJobsDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		s := openStore(t, db)
		ctx := context.Background()
		now := time.Now().UTC().Truncate(time.Millisecond)
		a, b := newJob("root-a", "", analysis.StatusRunning, now), newJob("root-b", "", analysis.StatusRunning, now)
		for _, j := range []*analysis.Job{a, b} {
			if err := s.Insert(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		update := func(j *analysis.Job) <-chan error {
			done := make(chan error, 1)
			go func() {
				next := *j
				next.Title = "renamed"
				done <- s.Update(ctx, &next, j.Version)
			}()
			return done
		}
		unlock := s.RelayLock(a.ID) // as the relay holds it while it removes a's entries
		doneA := update(a)
		select {
		case err := <-update(b):
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write of another job waited for the relay's lock of root-a")
		}
		inserted := make(chan error, 1)
		go func() { inserted <- s.Insert(ctx, newJob("root-c", "", analysis.StatusPending, now)) }()
		select {
		case err := <-inserted:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a submission's insert waited for the relay's lock of root-a")
		}
		select {
		case err := <-doneA:
			t.Fatalf("a write of root-a went (%v) while the relay held its lock", err)
		case <-time.After(100 * time.Millisecond):
		}
		unlock()
		if err := <-doneA; err != nil {
			t.Fatal(err)
		}
	})
}

// TestClearedFieldsStayCleared: a job's empty fields are not stored (the
// embedded store parses and rewrites every field at each update), and an
// update that empties one (a claim released, an error cleared) clears it
// in the database, not only in this process's copy: a reopened store reads
// it empty.
func TestClearedFieldsStayCleared(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testClearedFieldsStayCleared)
}

func testClearedFieldsStayCleared(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := openStore(t, db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	root := newJob(uuid.NewString(), "", analysis.StatusWaiting, now)
	if err := s.Insert(ctx, root); err != nil {
		t.Fatal(err)
	}
	stored := func() bson.M {
		t.Helper()
		var doc bson.M
		if err := db.Collection(jobstore.Collection).FindOne(ctx, bson.D{{Key: "_id", Value: root.ID}}).Decode(&doc); err != nil {
			t.Fatal(err)
		}
		return doc
	}
	claimed := []string{"lease_owner", "lease_until", "error", "attempts", "start_time"}
	for _, f := range claimed {
		if _, ok := stored()[f]; ok {
			t.Errorf("the new job stores empty field %s", f)
		}
	}
	if _, ok := stored()["project_id"]; !ok {
		t.Error("project_id is not stored: queries filter on it")
	}

	next := *root
	next.Status, next.LeaseOwner, next.LeaseUntil, next.Error, next.Attempts, next.StartTime =
		analysis.StatusRunning, "worker", new(now.Add(time.Minute)), "a first try failed", 1, new(now)
	if err := s.Update(ctx, &next, root.Version); err != nil {
		t.Fatal(err)
	}
	for _, f := range claimed {
		if _, ok := stored()[f]; !ok {
			t.Errorf("the claimed job does not store %s", f)
		}
	}
	done := next
	done.Status, done.LeaseOwner, done.LeaseUntil, done.Error = analysis.StatusWaiting, "", nil, ""
	if err := s.Update(ctx, &done, next.Version); err != nil {
		t.Fatal(err)
	}
	doc := stored()
	for _, f := range []string{"lease_owner", "lease_until", "error"} {
		if v, ok := doc[f]; ok {
			t.Errorf("the released job still stores %s = %v", f, v)
		}
	}
	got, err := openStore(t, db).Get(ctx, root.Tenant, root.Project, root.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.LeaseOwner != "" || got.LeaseUntil != nil || got.Error != "" || got.Attempts != 1 || got.StartTime == nil || got.Status != analysis.StatusWaiting {
		t.Errorf("read back: owner %q, until %v, error %q, attempts %d, started %v, status %s; want the claim and error cleared, the rest kept",
			got.LeaseOwner, got.LeaseUntil, got.Error, got.Attempts, got.StartTime, got.Status)
	}
}

// insertFinishedTree inserts a complete analysis and its one tool job,
// each with the outbox entries outbox gives (none if nil), and returns them
// as a tree for Archive: the analysis first.
func insertFinishedTree(t *testing.T, s *jobstore.Store, now time.Time, outbox func(j *analysis.Job) []events.OutboxEntry) []*analysis.Job {
	t.Helper()
	root := newJob(uuid.NewString(), "", analysis.StatusComplete, now)
	tool := newJob(root.ID, root.ID, analysis.StatusComplete, now)
	for _, j := range []*analysis.Job{root, tool} {
		var entries []events.OutboxEntry
		if outbox != nil {
			entries = outbox(j)
		}
		if err := s.Insert(context.Background(), j, entries...); err != nil {
			t.Fatal(err)
		}
	}
	return []*analysis.Job{root, tool}
}

// eachCountedMode is testkit.EachWriterModeCounted, telling test the mode.
func eachCountedMode(t *testing.T, test func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool)) {
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		test(t, db, rt, mongox.SingleWriter(db))
	})
}

// The archiver's batch goes in one call: the trees that may move go in one
// insert into the archive and one delete command (after, with many
// writers, one read of their live state); a tree that may not (an event
// not relayed) stays live, alone.
func TestArchiveMovesTreesTogether(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s := openStore(t, db)
		now := time.Now().UTC().Truncate(time.Millisecond)
		var trees [][]*analysis.Job
		for _, name := range []string{"a", "b", "c"} {
			trees = append(trees, insertFinishedTree(t, s, now, func(j *analysis.Job) []events.OutboxEntry {
				return []events.OutboxEntry{{ID: name + "-" + j.ID, Subject: "am.evt.acme.job." + j.ID}}
			}))
		}
		notB := func(outbox []events.OutboxEntry) bool {
			return !slices.ContainsFunc(outbox, func(e events.OutboxEntry) bool { return e.ID[0] == 'b' })
		}
		rt.Reset()
		done, err := s.Archive(ctx, trees, notB)
		if err != nil || !slices.Equal(done, []bool{true, false, true}) {
			t.Fatalf("Archive = %v, %v; want a and c archived", done, err)
		}
		// One read of the live jobs with many writers (b: not relayed),
		// one insert, one command of deletes; a single writer deletes in
		// one statement on the SQLite file (mongox.DeleteIDs).
		want := "delete analysis_jobs=1 find analysis_jobs=1 insert analysis_jobs_archive=1"
		if single {
			want = "delete analysis_jobs (sqlite)=1 insert analysis_jobs_archive=1"
		}
		if got := rt.String(); got != want {
			t.Errorf("round trips %q, want %q", got, want)
		}
		if l, a := count(t, db, jobstore.Collection), count(t, db, jobstore.ArchiveCollection); l != 2 || a != 4 {
			t.Errorf("live %d, archived %d; want 2 (tree b) and 4", l, a)
		}
		for i, tree := range trees {
			got, err := s.Get(ctx, "acme", "research", tree[1].ID)
			if err != nil || got.ID != tree[1].ID {
				t.Errorf("tree %d: Get = %v, %v", i, got, err)
			}
		}
	})
}

// Inserts made while another is under way are gathered into the next
// command: forty submissions at once cost a few inserts, not forty, and
// each caller gets its own outcome (a taken id fails that one alone).
func TestInsertsGatherWhileOneIsUnderWay(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s := openStore(t, db)
		now := time.Now().UTC().Truncate(time.Millisecond)
		taken := newJob(uuid.NewString(), "", analysis.StatusPending, now)
		if err := s.Insert(ctx, taken); err != nil {
			t.Fatal(err)
		}
		const n = 40
		jobs := make([]*analysis.Job, n)
		for i := range jobs {
			jobs[i] = newJob(uuid.NewString(), "", analysis.StatusPending, now)
		}
		jobs[n/2] = taken
		// The first insert stays under way until the others have been
		// asked for (on the embedded server a command of inserts takes
		// well under a millisecond: most would find none under way).
		var first sync.Once
		s.SetBeforeInsert(func() { first.Do(func() { time.Sleep(200 * time.Millisecond) }) })
		rt.Reset()
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Go(func() {
				<-start
				errs[i] = s.Insert(ctx, j, events.OutboxEntry{ID: j.ID, Subject: "am.evt.acme.job." + j.ID})
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if i == n/2 {
				if !errors.Is(err, analysis.ErrExists) {
					t.Errorf("insert of the taken id = %v, want ErrExists", err)
				}
			} else if err != nil {
				t.Errorf("insert %d: %v", i, err)
			}
		}
		if got := count(t, db, jobstore.Collection); got != n {
			t.Errorf("%d jobs stored, want %d", got, n)
		}
		if c := rt.Total(); c > n/4 {
			t.Errorf("%d commands for %d concurrent inserts (%s), want them gathered", c, n, rt)
		}
		t.Logf("%d concurrent inserts: %s", n, rt)
	})
}

// InsertAll inserts jobs in one command: a taken id fails that job alone,
// with ErrExists, and the others are stored and told to the relay.
func TestInsertAll(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, db *mongo.Database) {
		ctx := context.Background()
		s, relay, now := openNoted(t, db)
		root := newJob(uuid.NewString(), "", analysis.StatusWaiting, now)
		a, b, c := newJob(root.ID, root.ID, analysis.StatusPending, now), newJob(root.ID, root.ID, analysis.StatusPending, now), newJob(root.ID, root.ID, analysis.StatusPending, now)
		if err := s.Insert(ctx, b); err != nil {
			t.Fatal(err)
		}
		before := relay.count()
		errs := s.InsertAll(ctx, []*analysis.Job{a, b, c}, [][]events.OutboxEntry{{entry("a")}, {entry("b")}, {entry("c")}})
		if errs[0] != nil || !errors.Is(errs[1], analysis.ErrExists) || errs[2] != nil {
			t.Fatalf("InsertAll = %v; want a and c stored, b taken", errs)
		}
		for _, j := range []*analysis.Job{a, c} {
			if got, err := s.Get(ctx, "acme", "research", j.ID); err != nil || got.Status != analysis.StatusPending {
				t.Errorf("Get %s = %+v, %v", j.ID, got, err)
			}
		}
		if _, ids := stored(t, db, b.ID); len(ids) != 0 {
			t.Errorf("the taken job's document got entries %v", ids)
		}
		if n := relay.count() - before; n != 2 {
			t.Errorf("%d inserts told to the relay, want 2", n)
		}
	})
}

// With many writers, a job another replica writes between the archiver's
// read and its delete stays live at its new version, and its tree is not
// reported archived (it is offered again); the other trees are.
func TestArchiveKeepsAJobWrittenMeanwhile(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t)
	ctx := context.Background()
	s := openStore(t, db)
	now := time.Now().UTC().Truncate(time.Millisecond)
	var trees [][]*analysis.Job
	for range 2 {
		trees = append(trees, insertFinishedTree(t, s, now, nil))
	}
	written := trees[1][1]
	s.SetBeforeArchiveDelete(func() {
		// Another replica's version-checked write (this process's
		// document locks are held by the archiver).
		_, err := db.Collection(jobstore.Collection).UpdateOne(ctx,
			bson.D{{Key: "_id", Value: written.ID}, {Key: "version", Value: written.Version}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "title", Value: "retried"}}}, {Key: "$inc", Value: bson.D{{Key: "version", Value: 1}}}})
		if err != nil {
			t.Errorf("the other replica's write: %v", err)
		}
	})
	done, err := s.Archive(ctx, trees, relayed)
	if err != nil || !slices.Equal(done, []bool{true, false}) {
		t.Fatalf("Archive = %v, %v; want the first tree archived, the second not", done, err)
	}
	got, err := s.Get(ctx, "acme", "research", written.ID)
	if err != nil || got.Title != "retried" || got.Version != written.Version+1 {
		t.Fatalf("the job written meanwhile reads %+v, %v; want its new state (version %d)", got, err, written.Version+1)
	}
	if n := count(t, db, jobstore.Collection); n != 1 {
		t.Errorf("live jobs %d, want 1: the one written meanwhile", n)
	}
}

// GetMany reads live and archived jobs alike, the live copy first, and
// answers nil for an id not found and for a job of another scope; with many
// writers in one read of each collection, a single writer by _id alone.
func TestGetManyReadsLiveAndArchivedJobs(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s := openStore(t, db)
		now := time.Now().UTC().Truncate(time.Millisecond)
		tree := insertFinishedTree(t, s, now, nil)
		archived, archivedTool := tree[0], tree[1]
		live := newJob(uuid.NewString(), "", analysis.StatusRunning, now)
		foreign := newJob(uuid.NewString(), "", analysis.StatusRunning, now)
		foreign.Tenant = "globex"
		for _, j := range []*analysis.Job{live, foreign} {
			if err := s.Insert(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := archiveOne(ctx, s, relayed, archived, archivedTool); err != nil || !ok {
			t.Fatalf("archive: %v, %v", ok, err)
		}
		revived := *archivedTool
		revived.Title = "retried"
		if err := s.Update(ctx, &revived, archivedTool.Version); err != nil {
			t.Fatal(err)
		}
		reader := openStore(t, db) // reads from the database, not from s's memory
		rt.Reset()
		ids := []string{live.ID, "missing", archived.ID, foreign.ID, archivedTool.ID}
		got, err := reader.GetMany(ctx, "acme", "research", ids)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{live.Title, "", archived.Title, "", "retried"}
		for i, j := range got {
			title := ""
			if j != nil {
				title = j.Title
			}
			if title != want[i] {
				t.Errorf("GetMany[%d] (%s) = %q, want %q", i, ids[i], title, want[i])
			}
		}
		liveReads, archiveReads := rt.Count("find "+jobstore.Collection), rt.Count("find "+jobstore.ArchiveCollection)
		if !single && (liveReads != 1 || archiveReads != 1) {
			t.Errorf("many writers: %d reads of the live set and %d of the archive, want 1 each (%s)", liveReads, archiveReads, rt)
		}
		if scans := rt.NotExact(); single && len(scans) > 0 {
			t.Errorf("single writer: statements not by exact _id: %q", scans)
		}
	})
}

// A single writer's archiver asks its relayed function only about the
// outbox entries the relay has not reported stored in JetStream
// (Store.Published): about none for a job whose every entry was reported,
// about the rest for a job partly reported, about all after a report for
// another job. Many writers record nothing and ask about every entry.
func TestArchiveAsksOnlyAboutEntriesNotReportedPublished(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, _ *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s := openStore(t, db)
		now := time.Now().UTC().Truncate(time.Millisecond)
		entries := func(j *analysis.Job) []events.OutboxEntry {
			return []events.OutboxEntry{
				{ID: "a-" + j.ID, Subject: "am.evt.acme.job." + j.ID},
				{ID: "b-" + j.ID, Subject: "am.evt.acme.job." + j.ID},
			}
		}
		tree := insertFinishedTree(t, s, now, entries)
		root, tool := tree[0], tree[1]
		// Every entry of the root, the first of the tool job, and one of
		// a job that is not live.
		for _, report := range []struct {
			id  string
			ids []string
		}{{root.ID, []string{"a-" + root.ID, "b-" + root.ID}}, {tool.ID, []string{"a-" + tool.ID}}, {"gone", []string{"x"}}} {
			if err := s.Published(ctx, report.id, report.ids); err != nil {
				t.Fatal(err)
			}
		}
		var (
			mu    sync.Mutex
			asked []string
		)
		record := func(outbox []events.OutboxEntry) bool {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range outbox {
				asked = append(asked, e.ID)
			}
			return true
		}
		if ok, err := archiveOne(ctx, s, record, tree...); err != nil || !ok {
			t.Fatalf("Archive = %v, %v", ok, err)
		}
		want := []string{"b-" + tool.ID}
		if !single {
			want = []string{"a-" + root.ID, "b-" + root.ID, "a-" + tool.ID, "b-" + tool.ID}
		}
		slices.Sort(asked)
		slices.Sort(want)
		if !slices.Equal(asked, want) {
			t.Errorf("the archiver asked about %q, want %q", asked, want)
		}
		// What was recorded for the archived jobs is gone with them.
		if single {
			if n := s.RelayedRecorded(); n != 0 {
				t.Errorf("%d jobs' reports kept after they were archived", n)
			}
		}
	})
}

// TestUnrelayedNamesPendingJobEvents: Unrelayed returns the job events the
// outboxes of the jobs asked about hold, in the order asked, without work
// items, those the relay reported published, other scopes' or those of
// jobs not live; a single writer answers from its mirror, or reads a job it forgot
// by _id alone (no scan of the collection).
func TestUnrelayedNamesPendingJobEvents(t *testing.T) {
	t.Parallel()
	eachCountedMode(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips, single bool) {
		ctx := context.Background()
		s := openStore(t, db)
		now := time.Now().UTC().Truncate(time.Millisecond)
		tree := insertFinishedTree(t, s, now, func(j *analysis.Job) []events.OutboxEntry {
			return []events.OutboxEntry{
				{ID: "a-" + j.ID, Subject: "am.evt.acme.job." + j.ID},
				{ID: "work-" + j.ID, Subject: "am.work.analysis.tool"},
				{ID: "b-" + j.ID, Subject: "am.evt.acme.job." + j.ID},
			}
		})
		root, tool := tree[0], tree[1]
		other := newJob(uuid.NewString(), "", analysis.StatusComplete, now)
		other.Project = "elsewhere"
		if err := s.Insert(ctx, other, events.OutboxEntry{ID: "o", Subject: "am.evt.acme.job.o"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Published(ctx, root.ID, []string{"a-" + root.ID}); err != nil {
			t.Fatal(err)
		}
		if single {
			s.Forget(tool.ID) // read again, by _id
		}
		rt.Reset()
		got, err := s.Unrelayed(ctx, "acme", "research", []string{tool.ID, root.ID, other.ID, "missing"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.ID)
		}
		want := []string{"a-" + tool.ID, "b-" + tool.ID, "a-" + root.ID, "b-" + root.ID} // no mirror: what the documents hold
		if single {
			want = slices.DeleteFunc(want, func(id string) bool { return id == "a-"+root.ID }) // reported published
		}
		if !slices.Equal(ids, want) {
			t.Errorf("Unrelayed = %q, want %q", ids, want)
		}
		if scans := rt.NotExact(); single && len(scans) > 0 {
			t.Errorf("single writer: statements not by exact _id: %q", scans)
		}
	})
}
