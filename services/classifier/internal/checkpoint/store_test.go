package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

var scope = &commonv1.Scope{TenantId: "acme", ProjectId: "p"}

func newStore(t testing.TB) (*Store, *mongo.Database) {
	t.Helper()
	db := testkit.MongoDB(t)
	return openStore(t, db), db
}

// openStore returns a store on db with its indexes.
func openStore(t testing.TB, db *mongo.Database) *Store {
	t.Helper()
	s := NewStore(db)
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func machine(t testing.TB) statemachine.Machine {
	t.Helper()
	m, err := statemachine.New(statemachine.Config{MaxModelCalls: 10, MaxPlans: 3, MaxBatch: 4, BatchSize: 2, ChunkSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// outbox wraps a transition's events, numbered from 1: the store counts
// them but does not read the numbers.
func outbox(t testing.TB, tr statemachine.Transition) []events.OutboxEntry {
	t.Helper()
	var out []events.OutboxEntry
	for i, e := range tr.Events {
		entry, err := e.Envelope(scope, tr.Run.ID, uint64(i)+1)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry)
	}
	return out
}

// richRun is a run in AwaitingBatchApproval with every part of the context
// filled in.
func richRun(t testing.TB, m statemachine.Machine, id string) statemachine.Transition {
	t.Helper()
	must := func(tr statemachine.Transition, err error) statemachine.Transition {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	tr := m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "classify refunds")
	r := must(m.Planned(tr.Run, statemachine.Plan{TargetSampleSize: 1, QueryJSON: `{"$where":"x"}`}, errors.New("refused"))).Run
	r = must(m.Planned(r, statemachine.Plan{TargetSampleSize: 4, Strategy: "s", DetailsMarkdown: "d", AdditionalInstructions: "a", QueryJSON: `{"channel":"chat"}`}, nil)).Run
	r = must(m.Fetched(r, []string{"a", "b", "c"}, &statemachine.Sample{ID: "a", MessageCount: 3, Summary: "hi"}, nil)).Run
	r = must(m.Command(r, statemachine.RejectFetch, "more email")).Run
	r = must(m.Planned(r, statemachine.Plan{TargetSampleSize: 4, QueryJSON: `{}`}, nil)).Run
	r = must(m.Fetched(r, []string{"a", "b", "c"}, &statemachine.Sample{ID: "a", MessageCount: 3, Summary: "hi"}, nil)).Run
	r = must(m.Command(r, statemachine.ApproveFetch, "")).Run
	r = must(m.Classified(r, []statemachine.Classification{
		{ConversationID: "a", Label: statemachine.Resolved, Reason: "ok"}, {ConversationID: "b", Label: statemachine.Unresolved, Reason: "no"}})).Run
	r = must(m.Command(r, statemachine.ApproveBatch, "")).Run
	r = must(m.Saved(r)).Run
	return must(m.Classified(r, []statemachine.Classification{{ConversationID: "c", Label: statemachine.Resolved, Reason: "ok"}}))
}

func TestRoundTripKeepsTheWholeContext(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testRoundTripKeepsTheWholeContext)
}

func testRoundTripKeepsTheWholeContext(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("run-1", scope.GetTenantId(), scope.GetProjectId(), "classify refunds")
	lease := &Lease{Owner: "me", ExpiresAt: time.Now().Add(time.Minute).Truncate(time.Millisecond)}
	rec, err := s.Create(ctx, start.Run, lease, outbox(t, start))
	if err != nil {
		t.Fatal(err)
	}
	tr := richRun(t, m, "run-1")
	rec, err = s.Commit(ctx, rec, tr.Run, nil, outbox(t, tr))
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, scope, "run-1")
	if err != nil {
		t.Fatal(err)
	}
	opts := cmp.Options{cmpopts.EquateEmpty(), cmpopts.EquateApproxTime(time.Millisecond)}
	if diff := cmp.Diff(tr.Run, got.Run, append(opts, cmpopts.IgnoreFields(statemachine.Run{}, "CreateTime", "UpdateTime"))...); diff != "" {
		t.Errorf("loaded run (-want +got):\n%s", diff)
	}
	if got.Version != 2 || got.Lease != nil || got.LastEventID != rec.LastEventID || got.Run.CreateTime.IsZero() {
		t.Errorf("header: version %d lease %v last %q/%q", got.Version, got.Lease, got.LastEventID, rec.LastEventID)
	}
	if want := uint64(len(start.Events) + len(tr.Events)); got.EventCount != want || rec.EventCount != want {
		t.Errorf("event count: loaded %d, committed %d, want %d", got.EventCount, rec.EventCount, want)
	}
	if _, err := s.Load(ctx, &commonv1.Scope{TenantId: "globex", ProjectId: "p"}, "run-1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("load from another scope: %v", err)
	}
}

// Runs started while another's insert is under way are gathered into the
// next insert: thirty starts at once cost a few commands, not thirty, and
// each gets its own outcome (a taken id fails that start alone).
func TestCreatesGatherWhileOneIsUnderWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, rt := testkit.MongoDBCounted(t)
	s := openStore(t, db)
	m := machine(t)
	if _, err := s.Create(ctx, m.Start("taken", scope.GetTenantId(), scope.GetProjectId(), "i").Run, nil, nil); err != nil {
		t.Fatal(err)
	}
	const n = 30
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("run-%d", i)
	}
	ids[n/2] = "taken"
	rt.Reset()
	recs := make([]Record, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			<-start
			tr := m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "i")
			recs[i], errs[i] = s.Create(ctx, tr.Run, nil, outbox(t, tr))
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		switch {
		case i == n/2:
			if !errors.Is(err, mongox.ErrDuplicate) {
				t.Errorf("create of the taken id = %v, want ErrDuplicate", err)
			}
		case err != nil:
			t.Errorf("create %s: %v", ids[i], err)
		case recs[i].Version != 1 || recs[i].Run.ID != ids[i]:
			t.Errorf("create %s: record %+v", ids[i], recs[i])
		}
	}
	if c := rt.Total(); c > n/3 {
		t.Errorf("%d commands for %d concurrent creates (%s), want them gathered", c, n, rt)
	}
	for _, id := range ids {
		if _, err := s.Load(ctx, scope, id); err != nil {
			t.Errorf("load %s: %v", id, err)
		}
	}
}

// The state and its events are one write: after a commit the outbox holds
// the events of every transition not yet published, in order.
func TestCommitAppendsEventsInTheSameWrite(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testCommitAppendsEventsInTheSameWrite)
}

func testCommitAppendsEventsInTheSameWrite(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("run-2", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, start.Run, nil, outbox(t, start))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := m.Planned(start.Run, statemachine.Plan{TargetSampleSize: 1, QueryJSON: "{}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rec, tr.Run, nil, outbox(t, tr)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		State  string               `bson:"state"`
		Outbox []events.OutboxEntry `bson:"outbox"`
	}
	if err := db.Collection(Collection).FindOne(ctx, bson.D{{Key: "_id", Value: "run-2"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	want := append(outbox(t, start), outbox(t, tr)...)
	if doc.State != string(statemachine.Fetching) || len(doc.Outbox) != len(want) {
		t.Fatalf("state %s with %d outbox entries, want %d", doc.State, len(doc.Outbox), len(want))
	}
	for i, e := range doc.Outbox {
		if e.Subject != want[i].Subject {
			t.Errorf("entry %d on %s, want %s", i, e.Subject, want[i].Subject)
		}
	}
	if doc.Outbox[0].Subject != runevents.Subject("acme", "run-2", runevents.RunStarted) {
		t.Errorf("first subject %s", doc.Outbox[0].Subject)
	}
}

func TestStaleVersionConflicts(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testStaleVersionConflicts)
}

func testStaleVersionConflicts(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("run-3", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, start.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rec, start.Run, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rec, start.Run, nil, nil); !errors.Is(err, ErrConflict) {
		t.Errorf("commit at a stale version: %v", err)
	}
	if _, err := s.RenewLease(ctx, rec, Lease{Owner: "x", ExpiresAt: time.Now()}); !errors.Is(err, ErrConflict) {
		t.Errorf("renew at a stale version: %v", err)
	}
	ghost := rec
	ghost.Run.ID = "nope"
	if _, err := s.Commit(ctx, ghost, ghost.Run, nil, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("commit of a missing run: %v", err)
	}
}

// The writes of a run wait for each other and for the relay's removal of
// the run's published events (its LockDocument), but not for another
// run's: a run whose removal or archiving is under way holds up no other
// run's step. (The store had one lock for every run, held across each
// write: under load a started run's first write waited behind the steps of
// ~50 others, 150 ms at the median in the growth bench.)
func TestRunsDoNotWaitForEachOther(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testRunsDoNotWaitForEachOther)
}

func testRunsDoNotWaitForEachOther(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	recs := map[string]Record{}
	for _, id := range []string{"run-a", "run-b"} {
		rec, err := s.Create(ctx, m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "i").Run, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		recs[id] = rec
	}
	commit := func(id string) <-chan error {
		done := make(chan error, 1)
		go func() {
			run := recs[id].Run
			run.Feedback = "next"
			_, err := s.Commit(ctx, recs[id], run, nil, nil)
			done <- err
		}()
		return done
	}
	unlock := s.LockDocument("run-a") // as the relay holds it while it removes run-a's events
	a := commit("run-a")
	select {
	case err := <-commit("run-b"):
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write of run-b waited for run-a's lock")
	}
	select {
	case err := <-a:
		t.Fatalf("a write of run-a went (%v) while the relay held its lock", err)
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	if err := <-a; err != nil {
		t.Fatal(err)
	}
}

// A single writer writes a run it wrote last without reading its version
// first. That shortcut keeps every check of the read: a write in another
// scope, at a version the run has not reached, or after the run was
// archived is refused as before, in both writer modes. (Stale versions:
// TestStaleVersionConflicts, TestConcurrentCommitsExactlyOneWins.)
func TestKnownVersionsKeepTheChecks(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testKnownVersionsKeepTheChecks)
}

func testKnownVersionsKeepTheChecks(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("known", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, start.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err = s.Commit(ctx, rec, start.Run, nil, nil); err != nil {
		t.Fatal(err)
	}

	other := rec
	other.Run.TenantID = "globex"
	if _, err := s.Commit(ctx, other, other.Run, nil, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("commit in another tenant at the run's version: %v, want ErrNotFound", err)
	}
	ahead := rec
	ahead.Version++
	if _, err := s.Commit(ctx, ahead, ahead.Run, nil, nil); !errors.Is(err, ErrConflict) {
		t.Errorf("commit at a version the run has not reached: %v, want ErrConflict", err)
	}

	got, err := s.Load(ctx, scope, "known")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != rec.Version || got.Run.TenantID != scope.GetTenantId() {
		t.Errorf("after the refused writes: version %d tenant %s, want %d %s", got.Version, got.Run.TenantID, rec.Version, scope.GetTenantId())
	}

	// Finished, drained and archived: a write at its last version finds no
	// live run and leaves the archive as it was.
	done, err := s.Commit(ctx, got, m.Stop(got.Run, "done").Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ArchiveFinished(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.Collection(Collection).CountDocuments(ctx, bson.D{{Key: "_id", Value: "known"}}); n != 0 {
		t.Fatal("the finished run was not archived")
	}
	s.mu.Lock()
	_, kept := s.known["known"]
	s.mu.Unlock()
	// Runs that stay live (waiting for an approval) are forgotten past
	// maxKnown: the map never grows without bound.
	for i := range maxKnown + 10 {
		s.learn(fmt.Sprintf("waiting-%d", i), scope, 1)
	}
	s.mu.Lock()
	size := len(s.known)
	clear(s.known)
	s.mu.Unlock()
	if kept {
		t.Error("the store still holds the archived run's version (memory would grow with every run)")
	}
	if mongox.SingleWriter(db) && (size == 0 || size > maxKnown) {
		t.Errorf("after %d runs learned, %d remembered: want at most %d", maxKnown+10, size, maxKnown)
	}
	if _, err := s.RenewLease(ctx, done, Lease{Owner: "x", ExpiresAt: time.Now()}); !errors.Is(err, ErrNotFound) {
		t.Errorf("write of an archived run: %v, want ErrNotFound", err)
	}
	if after, err := s.Load(ctx, scope, "known"); err != nil || after.Version != done.Version || after.Lease != nil {
		t.Errorf("archived run after the refused write: version %d lease %v (%v), want %d and none", after.Version, after.Lease, err, done.Version)
	}
}

// Writers racing on one version: exactly one wins, every time. On FerretDB
// this holds only because the store serialises its writes (see Store).
func TestConcurrentCommitsExactlyOneWins(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testConcurrentCommitsExactlyOneWins)
}

func testConcurrentCommitsExactlyOneWins(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("run-4", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, start.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		var next Record
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run := rec.Run
				run.Feedback = fmt.Sprintf("writer %d", w)
				r, err := s.Commit(ctx, rec, run, nil, nil)
				if errors.Is(err, ErrConflict) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				wins++
				next = r
				mu.Unlock()
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d writers won", round, wins)
		}
		got, err := s.Load(ctx, scope, "run-4")
		if err != nil || got.Version != next.Version || got.Run.Feedback != next.Run.Feedback {
			t.Fatalf("round %d: stored %d/%q, winner %d/%q (%v)", round, got.Version, got.Run.Feedback, next.Version, next.Run.Feedback, err)
		}
		rec = next
	}
}

// Publishing the outbox while checkpoints are written loses no checkpoint
// and no event (on FerretDB, an unserialised relay could undo a commit).
func TestPublishingNeverUndoesACheckpoint(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testPublishingNeverUndoesACheckpoint)
}

func testPublishingNeverUndoesACheckpoint(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	bus := testBus(t)
	relay := runRelay(t, s, bus)

	start := m.Start("run-5", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, start.Run, nil, outbox(t, start))
	if err != nil {
		t.Fatal(err)
	}
	sent := len(start.Events)
	for i := range 60 {
		run := rec.Run
		run.Feedback = fmt.Sprint(i)
		tr := statemachine.Transition{Run: run, Events: []runevents.Event{{Type: runevents.BatchData, Data: i}}}
		rec, err = s.Commit(ctx, rec, run, nil, outbox(t, tr))
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		sent++
		relay.NotifyDocument("run-5")
	}
	got, err := s.Load(ctx, scope, "run-5")
	if err != nil || got.Version != rec.Version || got.Run.Feedback != "59" {
		t.Fatalf("stored version %d feedback %q, want %d/59 (%v)", got.Version, got.Run.Feedback, rec.Version, err)
	}
	st, err := bus.JetStream().Stream(ctx, events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool {
		info, err := st.Info(ctx)
		return err == nil && int(info.State.Msgs) == sent
	}, "all %d events published", sent)
}

func TestLoadRefusesDamage(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testLoadRefusesDamage)
}

func testLoadRefusesDamage(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	damages := map[string]bson.M{
		"schema version":       {"$set": bson.M{"schema_version": 2}},
		"state":                {"$set": bson.M{"state": "Dancing"}},
		"no context":           {"$unset": bson.M{"context": ""}},
		"mistyped list":        {"$set": bson.M{"context.labelled_ids": "abc"}},
		"mistyped counter":     {"$set": bson.M{"context.model_calls": "ten"}},
		"counters":             {"$set": bson.M{"context.resolved": 7}},
		"pending batch":        {"$set": bson.M{"context.pending_batch": bson.A{}}},
		"bad label":            {"$set": bson.M{"context.pending_batch.0.label": "MAYBE"}},
		"no instruction":       {"$set": bson.M{"context.instruction": ""}},
		"header version type":  {"$set": bson.M{"version": "seven"}},
		"plans lost for state": {"$set": bson.M{"context.plans": bson.A{}}},
	}
	for name, damage := range damages {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			id := "dmg-" + name
			tr := richRun(t, m, id)
			if _, err := s.Create(ctx, tr.Run, nil, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Collection(Collection).UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, damage); err != nil {
				t.Fatal(err)
			}
			// Damaged behind the store's back: a declared single writer
			// takes its own copy of a run it wrote for the truth, so the
			// damage is found by the next process to read it.
			s := openStore(t, db)
			_, err := s.Load(ctx, scope, id)
			var cerr *CorruptError
			if !errors.As(err, &cerr) || !errors.Is(err, ErrCorrupt) || cerr.ID != id {
				t.Fatalf("Load: %v, want a CorruptError", err)
			}
			// The run can be stopped from what the header says.
			stop := m.Corrupt(id, cerr.State, cerr.Cause)
			count, err := s.MarkCorrupt(ctx, scope, cerr, stop.Run.StopReason, outbox(t, stop))
			if err != nil {
				t.Fatalf("MarkCorrupt: %v", err)
			}
			if count != uint64(len(stop.Events)) {
				t.Errorf("MarkCorrupt: event count %d after %d events", count, len(stop.Events))
			}
			// Afterwards the run reads as Stopped with the reason: either
			// still undecodable, or decodable now that no state-specific
			// part is required.
			rec, err := s.Load(ctx, scope, id)
			state, reason := rec.Run.State, rec.Run.StopReason
			if errors.As(err, &cerr) {
				state, reason = cerr.State, cerr.StopReason
			} else if err != nil {
				t.Fatalf("after MarkCorrupt: %v", err)
			}
			if state != statemachine.Stopped || reason != stop.Run.StopReason {
				t.Errorf("after MarkCorrupt the run is %s / %q", state, reason)
			}
		})
	}
}

func TestListNewestFirstWithCorruptEntries(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testListNewestFirstWithCorruptEntries)
}

func testListNewestFirstWithCorruptEntries(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	// Creation order is listing order: runs created within one millisecond
	// (BSON dates' resolution) would list by id instead.
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	m := machine(t)
	ctx := context.Background()
	for i := range 3 {
		tr := m.Start(fmt.Sprintf("run-%d", i), scope.GetTenantId(), scope.GetProjectId(), "i")
		if _, err := s.Create(ctx, tr.Run, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Collection(Collection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "run-1"}}, bson.M{"$set": bson.M{"context": "x"}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.List(ctx, scope, ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Record.Run.ID != "run-2" || got[1].Corrupt == nil || got[1].Corrupt.ID != "run-1" || got[2].Record.Run.ID != "run-0" {
		t.Errorf("list: %+v", got)
	}
	page, err := s.List(ctx, scope, ListOptions{Offset: 2, Limit: 10, State: statemachine.Planning})
	if err != nil || len(page) != 1 || page[0].Record.Run.ID != "run-0" {
		t.Errorf("second page: %+v (%v)", page, err)
	}
}

// A finished run is archived once its events are out; it reads and lists
// as before, and an unfinished run or one with events pending stays live.
func TestArchiveFinishedRuns(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testArchiveFinishedRuns)
}

func testArchiveFinishedRuns(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	clock := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	s.now = func() time.Time { clock = clock.Add(time.Second); return clock } // creation order is listing order
	m := machine(t)
	ctx := context.Background()
	create := func(id string, finish bool, pending bool) {
		t.Helper()
		tr := m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "i")
		rec, err := s.Create(ctx, tr.Run, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if finish {
			st := m.Stop(tr.Run, "done")
			var ents []events.OutboxEntry
			if pending {
				ents = outbox(t, st)
			}
			if _, err := s.Commit(ctx, rec, st.Run, nil, ents); err != nil {
				t.Fatal(err)
			}
		}
	}
	create("a-live", false, false)
	create("b-done", true, false)
	create("c-pending", true, true)
	for id, want := range map[string]bool{"a-live": false, "b-done": true, "c-pending": false} {
		got, err := archive(ctx, s, id)
		if err != nil || got != want {
			t.Errorf("Archive(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	if again, err := archive(ctx, s, "b-done"); err != nil || again {
		t.Errorf("archiving twice: %v %v", again, err)
	}
	if n, _ := db.Collection(Collection).CountDocuments(ctx, bson.D{}); n != 2 {
		t.Errorf("%d live runs, want 2", n)
	}
	rec, err := s.Load(ctx, scope, "b-done")
	if err != nil || rec.Run.State != statemachine.Stopped || rec.Run.StopReason != "done" {
		t.Errorf("archived run: %+v (%v)", rec.Run, err)
	}
	if _, err := s.Load(ctx, &commonv1.Scope{TenantId: "globex", ProjectId: "p"}, "b-done"); !errors.Is(err, ErrNotFound) {
		t.Errorf("archived run from another scope: %v", err)
	}
	// A copy left in both collections (a crash mid-archive) lists once.
	raw, err := db.Collection(ArchiveCollection).FindOne(ctx, bson.D{{Key: "_id", Value: "b-done"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection(Collection).InsertOne(ctx, raw); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx, scope, ListOptions{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range list {
		ids = append(ids, e.Record.Run.ID)
	}
	if len(ids) != 3 || ids[0] != "c-pending" || ids[2] != "a-live" {
		t.Errorf("listed %v, want newest first, each once", ids)
	}
	page, err := s.List(ctx, scope, ListOptions{Offset: 1, Limit: 1})
	if err != nil || len(page) != 1 || page[0].Record.Run.ID != "b-done" {
		t.Errorf("page 2 of 1: %+v (%v)", page, err)
	}
	if ok, err := archive(ctx, s, "b-done"); err != nil || !ok {
		t.Errorf("finishing an interrupted archive: %v %v", ok, err)
	}
}

// runRelay runs the store's events relay on bus until the test ends.
func runRelay(tb testing.TB, s *Store, bus *events.Bus) *events.Relay {
	tb.Helper()
	relay := s.NewRelay(bus, nil)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = relay.Run(ctx) }()
	tb.Cleanup(func() { stop(); <-done })
	return relay
}

// testBus connects to a fresh NATS server with the event streams.
func testBus(tb testing.TB) *events.Bus {
	tb.Helper()
	ctx := context.Background()
	nats := testkit.NewNATS(tb)
	bus, err := events.Connect(ctx, nats.URL(), "test", nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = bus.Close() })
	if err := bus.EnsureStreams(ctx); err != nil {
		tb.Fatal(err)
	}
	return bus
}

// The relay archives a run the store finished once the run's last events
// are out; ArchiveFinished archives finished runs another process left in
// the live collection, at once or, with events still pending, once the
// relay has published them. Runs that can still change stay.
func TestRelayArchivesFinishedRuns(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testRelayArchivesFinishedRuns)
}

func testRelayArchivesFinishedRuns(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	other := NewStore(db) // a process that stopped before archiving
	m := machine(t)
	ctx := context.Background()
	relay := runRelay(t, s, testBus(t))
	write := func(st *Store, id string, finish, events bool) {
		t.Helper()
		tr := m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "i")
		rec, err := st.Create(ctx, tr.Run, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		next := tr
		if finish {
			next = m.Stop(tr.Run, "done")
		}
		ents := outbox(t, next)
		if !events {
			ents = nil
		}
		if _, err := st.Commit(ctx, rec, next.Run, nil, ents); err != nil {
			t.Fatal(err)
		}
	}
	where := func(id string) string {
		t.Helper()
		for _, c := range []string{Collection, ArchiveCollection} {
			n, err := db.Collection(c).CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return c
			}
		}
		return "nowhere"
	}
	write(s, "live", false, true)
	write(s, "done", true, true)
	relay.NotifyDocument("live")
	relay.NotifyDocument("done")
	testkit.Eventually(t, 10*time.Second, func() bool { return where("done") == ArchiveCollection }, "finished run archived")

	write(other, "left", true, false)
	write(other, "left-pending", true, true)
	if got := where("left"); got != Collection {
		t.Fatalf("run left by another process is in %s before ArchiveFinished", got)
	}
	if err := s.ArchiveFinished(ctx); err != nil {
		t.Fatal(err)
	}
	if got := where("left"); got != ArchiveCollection {
		t.Errorf("finished run with its events out is in %s after ArchiveFinished", got)
	}
	relay.NotifyDocument("left-pending")
	testkit.Eventually(t, 10*time.Second, func() bool { return where("left-pending") == ArchiveCollection }, "finished run archived once its events are out")
	if got := where("live"); got != Collection {
		t.Errorf("running run is in %s", got)
	}
	rec, err := s.Load(ctx, scope, "done")
	if err != nil || rec.Run.State != statemachine.Stopped {
		t.Errorf("archived run reads as %+v (%v)", rec.Run, err)
	}
}

// The relay may drain the events of a run's earlier step while the write
// that finishes the run is on its way (Commit notes the run, then waits
// for the store's lock to write). The note survives that early drain, and
// the drain after the write archives the run. A finishing write that fails
// drops its note.
func TestDrainedWhileTheFinishingWriteIsOnItsWay(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testDrainedWhileTheFinishingWriteIsOnItsWay)
}

func testDrainedWhileTheFinishingWriteIsOnItsWay(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	tr := m.Start("r", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, tr.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := m.Stop(tr.Run, "done")

	// Commit's two halves, with the relay's drain of the earlier step
	// between them.
	s.finish("r")
	if err := s.Drained(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	update := bson.M{"$set": bson.M{"state": string(stop.Run.State), "context": encodeContext(stop.Run)}}
	if err := s.updateVersioned(ctx, scope, "r", rec.Version, update, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Drained(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if n, _ := db.Collection(ArchiveCollection).CountDocuments(ctx, bson.D{{Key: "_id", Value: "r"}}); n != 1 {
		t.Fatal("the drain after the finishing write did not archive the run")
	}

	// A finishing write that loses a version race leaves no note behind.
	tr2 := m.Start("r2", scope.GetTenantId(), scope.GetProjectId(), "i")
	rec2, err := s.Create(ctx, tr2.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	stale := rec2
	stale.Version = 7
	if _, err := s.Commit(ctx, stale, m.Stop(tr2.Run, "done").Run, nil, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale finishing commit: %v, want ErrConflict", err)
	}
	s.fmu.Lock()
	noted := s.finishing["r2"]
	s.fmu.Unlock()
	if noted {
		t.Error("a failed finishing write left its note")
	}
}

// archive makes one archiving attempt, as Drained does for a run it noted,
// and reports whether it moved the run.
func archive(ctx context.Context, s *Store, id string) (bool, error) {
	defer s.lockRun(id)()
	out, err := s.archiveLocked(ctx, id)
	return out == archived, err
}

// finishedRun creates run id and stops it, with no events left to publish:
// ready to archive. It returns the record of the stopping write.
func finishedRun(t *testing.T, s *Store, m statemachine.Machine, id, reason string) Record {
	t.Helper()
	ctx := context.Background()
	tr := m.Start(id, scope.GetTenantId(), scope.GetProjectId(), "i")
	rec, err := s.Create(ctx, tr.Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err = s.Commit(ctx, rec, m.Stop(tr.Run, reason).Run, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// Archiving a run reads, copies and deletes it by _id, whatever the
// collections hold: with many writers the deletion names the version it
// copied (one conditional delete); a single writer copies the document it
// wrote last, with no read, and deletes it by _id.
func TestArchiveRoundTrips(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		s := openStore(t, db)
		m := machine(t)
		ctx := context.Background()
		for i := range 5 {
			finishedRun(t, s, m, fmt.Sprintf("old-%d", i), "done")
			if ok, err := archive(ctx, s, fmt.Sprintf("old-%d", i)); err != nil || !ok {
				t.Fatalf("archive old-%d: %v %v", i, ok, err)
			}
		}
		rec := finishedRun(t, s, m, "r", "done")
		rt.Reset()
		if ok, err := archive(ctx, s, "r"); err != nil || !ok {
			t.Fatalf("archive: %v %v", ok, err)
		}
		// A single writer archives from its copy of the run it wrote last,
		// and deletes it on the SQLite file (mongox.DeleteIDs).
		single := mongox.SingleWriter(db)
		want := fmt.Sprintf("delete %s=1 find %s=1 update %s=1", Collection, Collection, ArchiveCollection)
		if single {
			want = fmt.Sprintf("delete %s (sqlite)=1 update %s=1", Collection, ArchiveCollection)
		}
		if rt.String() != want {
			t.Errorf("round trips %q, want %q", rt.String(), want)
		}
		notExact := rt.NotExact()
		if single {
			if len(notExact) > 0 {
				t.Errorf("a single writer selected by more than _id: %v", notExact)
			}
			return
		}
		wantDelete := fmt.Sprintf(`delete %s {"_id": "r","version": {"$numberLong":"%d"}}`, Collection, rec.Version)
		if len(notExact) != 1 || notExact[0] != wantDelete {
			t.Errorf("many writers: selectors %q, want only %q", notExact, wantDelete)
		}
	})
}

// A run written by another process between the archiving's read and its
// deletion stays live, and the next archiving replaces the copy it left:
// the archive never keeps an older version than the last. Many writers
// only: a declared single writer has no other process writing its runs,
// and deletes a run at the version it wrote last without reading it.
func TestArchiveKeepsTheLastVersion(t *testing.T) {
	t.Parallel()
	testArchiveKeepsTheLastVersion(t, testkit.MongoDB(t))
}

func testArchiveKeepsTheLastVersion(t *testing.T, db *mongo.Database) {
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	rec := finishedRun(t, s, m, "r", "first")
	raw, err := db.Collection(Collection).FindOne(ctx, bson.D{{Key: "_id", Value: "r"}}).Raw()
	if err != nil {
		t.Fatal(err)
	}
	// Another writer writes the run after the archiving read it.
	run := rec.Run
	run.StopReason = "second"
	if _, err := NewStore(db).Commit(ctx, rec, run, nil, nil); err != nil {
		t.Fatal(err)
	}
	unlock := s.lockRun("r")
	out, err := s.moveLocked(ctx, "r", raw)
	unlock()
	if err != nil || out != changed {
		t.Fatalf("move of a run written meanwhile: %v %v, want changed", out, err)
	}
	if got, err := s.Load(ctx, scope, "r"); err != nil || got.Run.StopReason != "second" {
		t.Fatalf("after the overtaken move the run reads %q (%v), want the live second", got.Run.StopReason, err)
	}
	if ok, err := archive(ctx, s, "r"); err != nil || !ok {
		t.Fatalf("archiving again: %v %v", ok, err)
	}
	if got, err := s.Load(ctx, scope, "r"); err != nil || got.Run.StopReason != "second" || got.Version != rec.Version+1 {
		t.Errorf("archived run reads %q at version %d (%v), want second at %d", got.Run.StopReason, got.Version, err, rec.Version+1)
	}
	if n, _ := db.Collection(Collection).CountDocuments(ctx, bson.D{}); n != 0 {
		t.Errorf("%d runs left live", n)
	}
}

// TestEmptyContextPartsAreNotStored: a run's context leaves out the parts
// that are empty in most steps (the embedded store parses every stored
// field at every update), keeps the lists every state reads, and loads
// back whole (TestRoundTripKeepsTheWholeContext).
func TestEmptyContextPartsAreNotStored(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t)
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("run-slim", scope.GetTenantId(), scope.GetProjectId(), "classify refunds")
	if _, err := s.Create(ctx, start.Run, nil, outbox(t, start)); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Context bson.M `bson:"context"`
	}
	if err := db.Collection(Collection).FindOne(ctx, bson.D{{Key: "_id", Value: "run-slim"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"feedback", "replan_reason", "error_message", "summary", "pending_batch", "batch_ids", "continuation_fetch", "fetch_sample"} {
		if v, ok := doc.Context[f]; ok {
			t.Errorf("the new run's context stores empty %s = %v", f, v)
		}
	}
	for _, f := range []string{"instruction", "fetched_ids", "labelled_ids", "model_calls"} {
		if _, ok := doc.Context[f]; !ok {
			t.Errorf("the new run's context lacks %s", f)
		}
	}
	if _, err := s.Load(ctx, scope, "run-slim"); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// A declared single writer keeps a copy of each run it writes: Load reads
// the same record from it as a process reading the database, and a
// finished run is archived from it only once the relay has reported every
// entry the store wrote to the run published.
func TestSingleWriterArchivesFromItsCopyOnceEveryEntryIsOut(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t)
	mongox.MarkSingleWriter(db.Client())
	s := openStore(t, db)
	m := machine(t)
	ctx := context.Background()
	start := m.Start("r", scope.GetTenantId(), scope.GetProjectId(), "i")
	first := outbox(t, start)
	rec, err := s.Create(ctx, start.Run, nil, first)
	if err != nil {
		t.Fatal(err)
	}
	stop := m.Stop(start.Run, "done")
	last := outbox(t, stop)
	for i := range last {
		last[i].ID = fmt.Sprintf("stop-%d", i) // outbox numbers from 1 again
	}
	rec, err = s.Commit(ctx, rec, stop.Run, nil, last)
	if err != nil {
		t.Fatal(err)
	}
	fromCopy, err := s.Load(ctx, scope, "r")
	if err != nil {
		t.Fatal(err)
	}
	fromDB, err := NewStore(db).Load(ctx, scope, "r")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fromDB, fromCopy); d != "" {
		t.Fatalf("Load from the copy differs from the database's (-database +copy):\n%s", d)
	}

	var ids []string
	for _, e := range append(first, last...) {
		ids = append(ids, e.ID)
	}
	live := func() bool {
		t.Helper()
		n, err := db.Collection(Collection).CountDocuments(ctx, bson.D{{Key: "_id", Value: "r"}})
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	// Every entry but one reported: the run stays, whatever Drained says.
	if err := s.published(ctx, "r", ids[:len(ids)-1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Drained(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if !live() {
		t.Fatal("archived with an entry not reported published")
	}
	if s.gone("r") {
		t.Fatal("gone before it was archived")
	}
	if err := s.published(ctx, "r", ids[len(ids)-1:]); err != nil {
		t.Fatal(err)
	}
	if live() {
		t.Fatal("not archived once every entry was reported published")
	}
	if !s.gone("r") {
		t.Error("the relay is not told the archived run is gone")
	}
	archived, err := NewStore(db).Load(ctx, scope, "r")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(fromDB, archived); d != "" {
		t.Errorf("the archive differs from the live run (-live +archive):\n%s", d)
	}
	if archived.Version != rec.Version || archived.EventCount != uint64(len(ids)) {
		t.Errorf("archived at version %d with %d events, want %d and %d", archived.Version, archived.EventCount, rec.Version, len(ids))
	}
}

// With the relay running, a single writer's finished run leaves the live
// collection with no read of it and no removal of its published events:
// the relay reports them published, the store archives its copy, and the
// removal finds the run gone.
func TestRelayedRunArchivedWithoutReadsOrRemovals(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		s := openStore(t, db)
		m := machine(t)
		ctx := context.Background()
		bus := testBus(t)
		relay := runRelay(t, s, bus)
		if !mongox.SingleWriter(db) {
			relay.Notify() // the many writers' start-up sweep, before counting
		}
		testkit.Eventually(t, 10*time.Second, func() bool { return rt.Total() > 0 }, "the relay's first sweep")
		time.Sleep(100 * time.Millisecond)
		rt.Reset()
		start := m.Start("r", scope.GetTenantId(), scope.GetProjectId(), "i")
		rec, err := s.Create(ctx, start.Run, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		stop := m.Stop(start.Run, "done")
		if _, err := s.Commit(ctx, rec, stop.Run, nil, outbox(t, stop)); err != nil {
			t.Fatal(err)
		}
		// Watched through a client of its own, so the polling is not
		// counted.
		archive := testkit.Uncounted(t, db).Collection(ArchiveCollection)
		testkit.Eventually(t, 10*time.Second, func() bool {
			n, err := archive.CountDocuments(ctx, bson.D{{Key: "_id", Value: "r"}})
			return err == nil && n == 1
		}, "the run archived")
		time.Sleep(2 * relayRemovalDelay) // any removal would be written by now
		st, err := bus.JetStream().Stream(ctx, events.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		if info, err := st.Info(ctx); err != nil || int(info.State.Msgs) != len(stop.Events) {
			t.Fatalf("events stored: %v (%v), want %d", info, err, len(stop.Events))
		}
		got := rt.String()
		t.Logf("round trips: %s", got)
		if mongox.SingleWriter(db) {
			want := fmt.Sprintf("delete %s (sqlite)=1 insert %s (sqlite)=1 update %s=1 update %s=1", Collection, Collection, Collection, ArchiveCollection)
			if got != want {
				t.Errorf("round trips %q, want %q (no read of the run, no removal of its events)", got, want)
			}
		}
	})
}

// A run this store did not create (a previous process's, resumed here)
// has a copy that does not know the entries written before: the relay's
// drain after the finishing write archives it by reading it, as before the
// copies, not at the next ArchiveFinished.
func TestSingleWriterArchivesARunItDidNotCreate(t *testing.T) {
	t.Parallel()
	db := testkit.MongoDB(t)
	mongox.MarkSingleWriter(db.Client())
	m := machine(t)
	ctx := context.Background()
	start := m.Start("r", scope.GetTenantId(), scope.GetProjectId(), "i")
	if _, err := openStore(t, db).Create(ctx, start.Run, nil, outbox(t, start)); err != nil {
		t.Fatal(err) // the previous process, which died here
	}
	s := openStore(t, db)
	rec, err := s.Load(ctx, scope, "r")
	if err != nil {
		t.Fatal(err)
	}
	// Its earlier events are out by now (published and removed).
	if _, err := db.Collection(Collection).UpdateOne(ctx, bson.D{{Key: "_id", Value: "r"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: events.OutboxField, Value: bson.A{}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, rec, m.Stop(start.Run, "done").Run, nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Drained(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Collection(ArchiveCollection).CountDocuments(ctx, bson.D{{Key: "_id", Value: "r"}}); err != nil || n != 1 {
		t.Fatalf("the drained finished run is not archived (%d, %v)", n, err)
	}
}

// InFlight finds the live runs in a state an executor drives, leased or
// not, with their scope and lease, and none that waits for a human or has
// finished (live or archived).
func TestInFlightFindsTheRunsAnExecutorDrives(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := newStore(t)
	m := machine(t)
	other := &commonv1.Scope{TenantId: "globex", ProjectId: "q"}
	lease := &Lease{Owner: "proc/exec", ExpiresAt: time.Now().Add(time.Minute).UTC().Truncate(time.Millisecond)}
	create := func(id string, sc *commonv1.Scope, st statemachine.State, l *Lease) {
		t.Helper()
		run := m.Start(id, sc.GetTenantId(), sc.GetProjectId(), "i").Run
		run.State = st
		if _, err := s.Create(ctx, run, l, nil); err != nil {
			t.Fatal(err)
		}
	}
	create("planning", scope, statemachine.Planning, lease)
	create("classifying", other, statemachine.Classifying, nil)
	create("error", scope, statemachine.Error, nil)
	create("waiting", scope, statemachine.AwaitingFetchApproval, nil)
	create("batch", scope, statemachine.AwaitingBatchApproval, nil)
	finishedRun(t, s, m, "stopped", "done")
	finishedRun(t, s, m, "archived", "done")
	if err := s.ArchiveFinished(ctx); err != nil {
		t.Fatal(err)
	}

	runs, err := s.InFlight(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]InFlightRun{}
	for _, r := range runs {
		got[r.ID] = r
	}
	if len(got) != 3 || len(runs) != 3 {
		t.Fatalf("in flight %+v, want planning, classifying and error", runs)
	}
	if r := got["planning"]; r.State != statemachine.Planning || r.Scope.GetTenantId() != "acme" || r.Lease == nil ||
		r.Lease.Owner != lease.Owner || !r.Lease.ExpiresAt.Equal(lease.ExpiresAt) {
		t.Errorf("planning: %+v (lease %+v)", r, r.Lease)
	}
	if r := got["classifying"]; r.State != statemachine.Classifying || r.Scope.GetTenantId() != "globex" ||
		r.Scope.GetProjectId() != "q" || r.Lease != nil {
		t.Errorf("classifying: %+v", r)
	}
	if r := got["error"]; r.State != statemachine.Error || r.Lease != nil {
		t.Errorf("error: %+v", r)
	}
}
