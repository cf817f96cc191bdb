package session_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session/mongostore"
)

var scope = session.Scope{TenantID: "acme", ProjectID: "shop"}

// shop is the sample SQLite database behind connection "sample".
type shop struct {
	path string
	dbs  *connections.Registry
}

func newShop(t testing.TB) *shop {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shop.db")
	spec, err := connections.CreateSample(path)
	if err != nil {
		t.Fatal(err)
	}
	dbs, err := connections.Open([]connections.Spec{spec}, connections.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dbs.Close)
	return &shop{path: path, dbs: dbs}
}

// schemaVersion is SQLite's schema cookie, which every committed CREATE or
// DROP moves on: it counts the table writes that ran, with no trigger.
func (sh *shop) schemaVersion(t *testing.T) int {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+sh.path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRow("PRAGMA schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// clock is a settable time source for agents.
type clock struct{ now atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.now.Store(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.now.Load()).UTC() }
func (c *clock) Advance(d time.Duration) { c.now.Add(int64(d)) }

// opts are agent options on this clock.
func (c *clock) opts() session.Options {
	return session.Options{Now: c.Now, QueryTimeout: 5 * time.Second}
}

// newStore returns a session store on db.
func newStore(t testing.TB, db *mongo.Database) *mongostore.Store {
	t.Helper()
	st, err := mongostore.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// send sends text and fails the test on error or when the session does
// not end in stage.
func send(t *testing.T, a *session.Agent, id, text string, stage session.Stage) session.Reply {
	t.Helper()
	s, r, err := a.Send(context.Background(), scope, id, text, "")
	if err != nil {
		t.Fatalf("Send(%q): %v", text, err)
	}
	if s.Stage != stage {
		t.Fatalf("Send(%q): stage %s (%q), want %s", text, s.Stage, r.Text, stage)
	}
	return r
}

const userSQL = "SELECT customer_id, name FROM customers"

// toConfirmSQL starts a session on the sample and brings it to the
// confirmation of userSQL.
func toConfirmSQL(t *testing.T, a *session.Agent) string {
	t.Helper()
	return toConfirmUserSQL(t, a, userSQL)
}

// toConfirmUserSQL starts a session on the sample and brings it to the
// confirmation of sql.
func toConfirmUserSQL(t *testing.T, a *session.Agent, sql string) string {
	t.Helper()
	s, _, err := a.Create(context.Background(), scope, connections.SampleName)
	if err != nil {
		t.Fatal(err)
	}
	send(t, a, s.ID, "own sql", session.StageNeedUserSQL)
	send(t, a, s.ID, sql, session.StageConfirmUserSQL)
	return s.ID
}

// toConfirmWrite brings a new session to the confirmation of writing the
// result of userSQL to table, dropping it first if it exists.
func toConfirmWrite(t *testing.T, a *session.Agent, table string) string {
	t.Helper()
	id := toConfirmSQL(t, a)
	send(t, a, id, "yes", session.StageExecuteSQL)
	send(t, a, id, "customers copy", session.StageShowResults)
	send(t, a, id, "write", session.StageNeedTableName)
	send(t, a, id, table, session.StageAskWriteMode)
	send(t, a, id, "drop", session.StageConfirmWrite)
	return id
}

// claims counts the execution claims of session id.
func claims(t *testing.T, db *mongo.Database, id string) int64 {
	t.Helper()
	n, err := db.Collection(mongostore.ExecutionsCollection).CountDocuments(context.Background(), bson.D{{Key: "session_id", Value: id}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// gate makes the next n Gets of the stores it wraps wait for one another:
// two confirmations then both read the session before either writes, the
// race a retry after a failover or two replicas make.
type gate struct {
	waiting atomic.Int32 // Gets still to hold
	arrived sync.WaitGroup
}

func (g *gate) arm(n int) {
	g.arrived.Add(n)
	g.waiting.Store(int32(n))
}

type gatedStore struct {
	session.Store
	g *gate
}

func (s gatedStore) Get(ctx context.Context, scope session.Scope, id string) (*session.Session, error) {
	got, err := s.Store.Get(ctx, scope, id)
	if s.g.waiting.Add(-1) >= 0 {
		s.g.arrived.Done()
		s.g.arrived.Wait()
	}
	return got, err
}

// Two confirmations of one pending SQL, through two agents on one
// database, read the session together: the SQL runs once, and the loser is
// told the SQL is running or the session moved on. For a write the schema
// cookie of the target database shows how many times the table was made:
// once, as for a write that had no rival.
func TestConcurrentConfirmationsRunTheSQLOnce(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testConcurrentConfirmationsRunTheSQLOnce)
}

func testConcurrentConfirmationsRunTheSQLOnce(t *testing.T, db *mongo.Database) {
	sh := newShop(t)
	c := newClock()
	g := &gate{}
	agents := []*session.Agent{
		session.NewAgent(gatedStore{newStore(t, db), g}, sh.dbs, nil, c.opts()),
		session.NewAgent(gatedStore{newStore(t, db), g}, sh.dbs, nil, c.opts()),
	}

	// What one write makes to the schema, with no rival.
	alone := toConfirmWrite(t, agents[0], "alone")
	before := sh.schemaVersion(t)
	send(t, agents[0], alone, "yes", session.StageNeedWriteOrEmail)
	oneWrite := sh.schemaVersion(t) - before
	if oneWrite < 1 {
		t.Fatalf("a write moved the schema cookie by %d", oneWrite)
	}

	// race sends text to session id from both agents at once.
	race := func(id, text string) (winner *session.Session, losers []error) {
		t.Helper()
		claimed := claims(t, db, id)
		g.arm(len(agents))
		type result struct {
			s   *session.Session
			err error
		}
		results := make(chan result, len(agents))
		for _, a := range agents {
			go func() {
				s, _, err := a.Send(context.Background(), scope, id, text, "")
				results <- result{s, err}
			}()
		}
		for range agents {
			r := <-results
			if r.err == nil {
				if winner != nil {
					t.Errorf("both confirmations succeeded")
				}
				winner = r.s
				continue
			}
			losers = append(losers, r.err)
		}
		if winner == nil {
			t.Fatalf("no confirmation succeeded: %v", losers)
		}
		for _, err := range losers {
			if !errors.Is(err, session.ErrExecuting) && !errors.Is(err, session.ErrConflict) {
				t.Errorf("the losing confirmation: %v, want ErrExecuting or ErrConflict", err)
			}
		}
		if n := claims(t, db, id) - claimed; n != 1 {
			t.Errorf("%d executions claimed, want 1", n)
		}
		return winner, losers
	}

	t.Run("write", func(t *testing.T) {
		id := toConfirmWrite(t, agents[1], "raced")
		before := sh.schemaVersion(t)
		winner, _ := race(id, "yes")
		if winner.Stage != session.StageNeedWriteOrEmail {
			t.Errorf("winner's session in %s", winner.Stage)
		}
		if got := sh.schemaVersion(t) - before; got != oneWrite {
			t.Errorf("the two confirmations moved the schema cookie by %d; one write moves it by %d", got, oneWrite)
		}
	})
	t.Run("compare", func(t *testing.T) {
		id := toConfirmCompare(t, agents[1], "raced_diff")
		before := sh.schemaVersion(t)
		winner, _ := race(id, "yes")
		if winner.Stage != session.StageNeedWriteOrEmail || winner.Params["row_count"] != "1" {
			t.Errorf("winner's session in %s, %v", winner.Stage, winner.Params)
		}
		if got := sh.schemaVersion(t) - before; got != oneWrite {
			t.Errorf("the two confirmations moved the schema cookie by %d; one write moves it by %d", got, oneWrite)
		}
	})
	t.Run("read", func(t *testing.T) {
		// A read runs once its job name is given.
		id := toConfirmSQL(t, agents[0])
		send(t, agents[0], id, "yes", session.StageExecuteSQL)
		winner, _ := race(id, "nightly customers")
		if winner.Stage != session.StageShowResults {
			t.Errorf("winner's session in %s", winner.Stage)
		}
		results := 0
		for _, turn := range winner.Turns {
			if strings.HasPrefix(turn.Text, "The query returned") {
				results++
			}
		}
		if results != 1 {
			t.Errorf("%d results recorded, want 1", results)
		}
	})
}

// An execution whose process died (claimed, EXECUTING, never recorded)
// holds the session until its deadline: input meanwhile is refused with
// ErrExecuting. After it, the next input — even a "yes" — is not acted on:
// the session returns to the confirmation saying the write was interrupted
// and may have happened, nothing runs, and only a new confirmation writes
// the table again.
func TestInterruptedExecutionIsNeverRerunSilently(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testInterruptedExecutionIsNeverRerunSilently)
}

func testInterruptedExecutionIsNeverRerunSilently(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	sh := newShop(t)
	c := newClock()
	store := newStore(t, db)
	a := session.NewAgent(store, sh.dbs, nil, c.opts())
	id := toConfirmWrite(t, a, "copy")

	// What a process that died right after claiming the execution leaves.
	s, err := store.Get(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	s.Turns = append(s.Turns, session.Turn{Role: "user", Text: "yes", Time: c.Now()})
	s.Stage = session.StageExecuting
	s.Execution = &session.Execution{ID: fmt.Sprintf("%s/%d", s.ID, s.Version+1), From: session.StageConfirmWrite, Started: c.Now(), Deadline: c.Now().Add(time.Minute)}
	if err := store.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := store.ClaimExecution(ctx, s); err != nil {
		t.Fatal(err)
	}
	before, claimed := sh.schemaVersion(t), claims(t, db, id)

	c.Advance(59 * time.Second)
	if _, _, err := a.Send(ctx, scope, id, "yes", ""); !errors.Is(err, session.ErrExecuting) {
		t.Fatalf("input before the deadline: %v, want ErrExecuting", err)
	}
	if now, err := store.Get(ctx, scope, id); err != nil || now.Version != s.Version || now.Stage != session.StageExecuting {
		t.Fatalf("refused input changed the session: %+v (%v)", now, err)
	}

	c.Advance(2 * time.Second)
	r := send(t, a, id, "yes", session.StageConfirmWrite)
	if !strings.Contains(r.Text, "interrupted") || !strings.Contains(r.Text, "may or may not have been written") || r.SQLToConfirm != userSQL {
		t.Errorf("reply after the deadline: %+v", r)
	}
	if got := sh.schemaVersion(t); got != before {
		t.Fatalf("the interrupted write ran again: schema cookie %d → %d", before, got)
	}
	if n := claims(t, db, id); n != claimed {
		t.Errorf("%d executions claimed before the new confirmation, want %d", n, claimed)
	}

	r = send(t, a, id, "yes", session.StageNeedWriteOrEmail)
	if !strings.HasPrefix(r.Text, "Wrote ") || sh.schemaVersion(t) == before {
		t.Errorf("the new confirmation: %q, schema cookie %d → %d", r.Text, before, sh.schemaVersion(t))
	}
	if n := claims(t, db, id); n != claimed+1 {
		t.Errorf("%d executions claimed, want %d", n, claimed+1)
	}
}

// heldDBs holds the queries of the databases it wraps until release is
// closed: a confirmed SQL that runs as long as the test needs.
type heldDBs struct {
	session.Databases
	release chan struct{}
}

func (h heldDBs) Query(ctx context.Context, name, sql string, limit int, timeout time.Duration) (*connections.Result, error) {
	<-h.release
	return h.Databases.Query(ctx, name, sql, limit, timeout)
}

// startHeld takes a new session of a, whose databases hold its SQL
// (heldDBs), to its execution, and returns once the session is EXECUTING;
// done receives the execution's error when it ends.
func startHeld(t *testing.T, a *session.Agent, store session.Store) (id string, done <-chan error) {
	t.Helper()
	id = toConfirmSQL(t, a)
	send(t, a, id, "yes", session.StageExecuteSQL)
	ended := make(chan error, 1)
	go func() {
		_, _, err := a.Send(context.Background(), scope, id, "held", "")
		ended <- err
	}()
	testkit.Eventually(t, 10*time.Second, func() bool {
		s, err := store.Get(context.Background(), scope, id)
		return err == nil && s.Stage == session.StageExecuting
	}, "the execution to start")
	return id, ended
}

// An execution's claim, not its deadline (the query timeout and a grace,
// a minute here), says whether it still runs: while its executor renews
// the claim, the session takes no input however long the SQL runs; once
// the executor is gone (the claim was not renewed), the next input after
// the claim's TTL finds the execution interrupted.
func TestExecutionClaimOutlivesNoExecutor(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testExecutionClaimOutlivesNoExecutor)
}

func testExecutionClaimOutlivesNoExecutor(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	sh := newShop(t)
	store := newStore(t, db)
	// Renewed every third of it: long enough that a loaded test machine
	// does not delay a renewal past it.
	const ttl = time.Second

	// A live executor, its SQL held for many TTLs.
	dbs := heldDBs{Databases: sh.dbs, release: make(chan struct{})}
	a := session.NewAgent(store, dbs, nil, session.Options{QueryTimeout: 30 * time.Second, ExecutionLeaseTTL: ttl})
	id, done := startHeld(t, a, store)
	executing := time.Now()
	testkit.Eventually(t, 10*time.Second, func() bool { return time.Since(executing) > 4*ttl }, "four claim TTLs to pass")
	if _, _, err := a.Send(ctx, scope, id, "hello", ""); !errors.Is(err, session.ErrExecuting) {
		t.Errorf("input while the executor runs, after 4 claim TTLs: %v, want ErrExecuting", err)
	}
	close(dbs.release)
	if err := <-done; err != nil {
		t.Fatalf("the held execution: %v", err)
	}
	if s, err := store.Get(ctx, scope, id); err != nil || s.Stage != session.StageShowResults {
		t.Fatalf("after the held execution: %+v (%v)", s, err)
	}

	// A dead executor: claimed, EXECUTING, never renewed or recorded.
	c := newClock()
	opts := c.opts()
	opts.ExecutionLeaseTTL = 6 * time.Second
	b := session.NewAgent(store, sh.dbs, nil, opts)
	id = toConfirmSQL(t, b)
	s, err := store.Get(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	s.Stage = session.StageExecuting
	s.Execution = &session.Execution{ID: fmt.Sprintf("%s/%d", s.ID, s.Version+1), From: session.StageConfirmUserSQL,
		Started: c.Now(), Deadline: c.Now().Add(time.Minute), Until: c.Now().Add(opts.ExecutionLeaseTTL)}
	if err := store.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := store.ClaimExecution(ctx, s); err != nil {
		t.Fatal(err)
	}
	c.Advance(5 * time.Second)
	if _, _, err := b.Send(ctx, scope, id, "yes", ""); !errors.Is(err, session.ErrExecuting) {
		t.Fatalf("input before the claim lapsed: %v, want ErrExecuting", err)
	}
	c.Advance(2 * time.Second) // past the claim, 53 s before the deadline
	r := send(t, b, id, "yes", session.StageConfirmUserSQL)
	if !strings.Contains(r.Text, "interrupted") || r.SQLToConfirm != userSQL {
		t.Errorf("input after the claim lapsed: %+v, want the interrupted query to confirm again", r)
	}
}

// A sole writer (agentmesh up) restarted after a kill finds the killed
// process's execution recorded as running, its claim renewed a moment
// before: no executor of its own runs it, so the next input finds it
// interrupted at once, not when the claim lapses; an execution it runs
// itself still holds the session.
func TestSoleWriterTakesADeadProcesssExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testkit.MongoDB(t)
	mongox.MarkSingleWriter(db.Client())
	sh := newShop(t)
	store := newStore(t, db)
	opts := session.Options{QueryTimeout: 30 * time.Second, ExecutionLeaseTTL: time.Minute, SoleWriter: true}

	dbs := heldDBs{Databases: sh.dbs, release: make(chan struct{})}
	killed := session.NewAgent(store, dbs, nil, opts)
	id, done := startHeld(t, killed, store)
	if _, _, err := killed.Send(ctx, scope, id, "hello", ""); !errors.Is(err, session.ErrExecuting) {
		t.Fatalf("input while this process runs the execution: %v, want ErrExecuting", err)
	}

	restarted := session.NewAgent(store, sh.dbs, nil, opts)
	r := send(t, restarted, id, "yes", session.StageExecuteSQL)
	if !strings.Contains(r.Text, "interrupted") {
		t.Errorf("input after the restart: %+v, want the interrupted query to confirm again", r)
	}
	close(dbs.release)
	if err := <-done; err == nil {
		t.Errorf("the killed process's execution recorded its result over the restarted one's session")
	}
}

// One SQL job (its name given at EXECUTE_SQL → run → SHOW_RESULTS) costs a fixed number of
// database round trips, each by _id: a read of the session, the EXECUTING
// write, the claim, the result's write; for a single writer each write is
// a read and a write by _id (nothing another filter would make FerretDB
// scan), with many writers one conditional update keyed by _id.
func TestSQLJobRoundTrips(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, func(t *testing.T, plain *mongo.Database) {
		db, rt := testkit.MongoDBCounted(t)
		single := mongox.SingleWriter(plain)
		if single {
			mongox.MarkSingleWriter(db.Client())
		}
		sh := newShop(t)
		a := session.NewAgent(newStore(t, db), sh.dbs, nil, newClock().opts())
		for range 5 { // sessions that came before
			toConfirmSQL(t, a)
		}
		id := toConfirmSQL(t, a)
		send(t, a, id, "yes", session.StageExecuteSQL)
		rt.Reset()
		send(t, a, id, "customers", session.StageShowResults)
		reads := 1
		if single {
			reads = 3
		}
		want := fmt.Sprintf("find %s=%d insert %s=1 insert %s=1 update %s=2", mongostore.Collection, reads, mongostore.ExecutionsCollection,
			mongostore.JobsCollection, mongostore.Collection)
		if rt.String() != want {
			t.Errorf("one SQL job made %q, want %q", rt.String(), want)
		}
		if single {
			if s := rt.NotExact(); len(s) > 0 {
				t.Errorf("a single writer selected by more than _id: %v", s)
			}
		} else if s := rt.Unkeyed(); len(s) > 0 {
			t.Errorf("selected without _id: %v", s)
		}
	})
}

// A read interrupted after its job name was given (its executor died)
// comes back to EXECUTE_SQL saying so; a confirmation there runs it again
// under the name given, and only then.
func TestInterruptedReadKeepsItsJobName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh := newShop(t)
	c := newClock()
	store := newStore(t, testkit.MongoDB(t))
	a := session.NewAgent(store, sh.dbs, nil, c.opts())
	id := toConfirmSQL(t, a)
	send(t, a, id, "yes", session.StageExecuteSQL)
	s, err := store.Get(ctx, scope, id)
	if err != nil {
		t.Fatal(err)
	}
	// What a process that died right after claiming the named run leaves.
	s.Params["job_name"] = "weekly customers"
	s.Stage = session.StageExecuting
	s.Execution = &session.Execution{ID: fmt.Sprintf("%s/%d", s.ID, s.Version+1), From: session.StageExecuteSQL, Started: c.Now(), Deadline: c.Now().Add(time.Minute)}
	if err := store.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := store.ClaimExecution(ctx, s); err != nil {
		t.Fatal(err)
	}
	c.Advance(2 * time.Minute)
	r := send(t, a, id, "okay", session.StageExecuteSQL)
	if !strings.Contains(r.Text, "interrupted") || r.SQLToConfirm != userSQL || r.Result != nil {
		t.Fatalf("after the deadline: %+v, want the interrupted query to confirm again", r)
	}
	r = send(t, a, id, "okay", session.StageShowResults)
	if r.Job == nil || r.Job.Name != "weekly customers" || r.Result == nil || len(r.Result.Rows) == 0 {
		t.Fatalf("the run confirmed again: job %+v, result %v", r.Job, r.Result)
	}
}
