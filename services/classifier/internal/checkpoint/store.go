// Package checkpoint persists a classification run's whole context in one
// MongoDB document per run, after every transition.
//
// The document has a header (id, scope, state, version, schema_version,
// lease, last event id, event count, times), the run context under
// "context", and the
// run's pending events under "outbox" (libs/events per-document outbox).
// Every write is a single-document update guarded by the version it read
// (optimistic concurrency, mongox.UpdateVersioned): the new state, the
// context, the lease and the events go in together or not at all, and a
// writer that lost a race gets ErrConflict instead of overwriting.
//
// The lease ({owner, expires_at}) marks the one executor driving the run;
// it is taken, renewed and released with the same versioned writes.
//
// The event count numbers the run's events: the writer of a checkpoint
// gives its events the sequences after Record.EventCount (see
// runevents.Event.Envelope), and the write adds them to the count, so the
// numbers a run's events carry are 1, 2, 3... with no gap or repeat.
//
// A finished run whose events are all published is moved to an archive
// collection (Drained, called by the events relay once a run's
// outbox is empty, and ArchiveFinished), so the collection that is written
// to holds only runs that can still change. Reads look in both.
//
// # Round trips, and what scans
//
// On the embedded FerretDB v1 only an exact {_id: x} filter is found
// without parsing every document of the collection. The hot path uses
// nothing else: Create inserts; Load reads by _id (live, then archive) and
// checks the scope in Go; Commit, RenewLease and MarkCorrupt are
// mongox.UpdateVersioned on {_id, tenant_id, project_id}, which for a
// declared single writer (mongox.SingleWriter, agentmesh up) reads and
// writes by _id and checks the rest in Go, and with many writers is
// MongoDB's atomic conditional update; the relay reads and clears a named
// run's outbox by _id; archiving reads, copies and deletes by _id (see
// archiveLocked for the version it names with many writers). A declared
// single writer also keeps a copy of each live run it wrote: Load reads
// none of those, and a finished run is archived from its copy as soon as
// the relay reports its last events published (events.Relay.SetPublished),
// then deleted by _id, with no read, and the relay writes no removal of
// those events (events.Relay.SetGone). What scans,
// on FerretDB, is off the hot path and bounded by the live set or rare:
// ArchiveFinished (every ArchiveInterval), InFlight (Runner.Recover's
// sweep) and the relay's sweep (every SweepInterval, never on a write) read
// the live collection, which holds the runs in flight and those waiting; List reads both collections by scope, as a user's
// listing does; MarkCorrupt of a run whose header has no readable version
// updates by scope.
//
// # Queries and indexes (MongoDB)
//
// Every query the store (and the relay of its live collection) makes, and
// the index that serves it with many writers; a test records each query's
// shape and checks it against the indexes (TestEveryQueryIsIndexed):
//
//	query                                          collections    index
//	Load, Commit, RenewLease, MarkCorrupt,         both           _id_
//	  archiving: {_id, ...}
//	List: {tenant_id, project_id}                  both           scope_created_id
//	  sort {create_time: -1, _id: 1}                                {tenant_id, project_id, create_time: -1, _id: 1}
//	List with a state: {..., state} same sort      both           scope_state_created_id
//	                                                                {tenant_id, project_id, state, create_time: -1, _id: 1}
//	ArchiveFinished: {state: {$in: [finished]}}    live           state {state}
//	InFlight: {state: {$in: [in flight]}}          live           state {state}
//	relay sweep: {"outbox.0": {$exists: true}}     live           outbox_pending (sparse, events.OutboxIndex)
//	  paged by _id
//
// For a single writer EnsureIndexes makes scope_created_id only, as it did
// its predecessor scope_created (which it drops): FerretDB reads by no
// index. What is assumed of MongoDB: the planner picks these indexes
// (ESR: equalities, then the sort, then ranges), $in over two states is
// served as equalities, and a sparse index serves {$exists: true}, so the
// sweep reads only the runs with pending events and sorts those few.
//
// # Many writers
//
// With replicas on MongoDB, every state change is a conditional update on
// the version the writer read, or a unique insert; the lease keeps one
// executor per run. This assumes what MongoDB guarantees: a single-document
// update or delete is atomic and a unique index refuses a second insert.
// FerretDB v1 applies updates as a read and a write without isolation
// between clients, so several processes on one FerretDB can lose a racing
// write (one process is safe: see Store).
//
// Load refuses a document it cannot fully decode (type mismatch, unknown
// schema version, unknown state, a context that contradicts its state) with
// a *CorruptError: a run is never resumed from an empty or partial context.
package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Collections of checkpoints: runs that may still change, and finished runs
// whose events are all published.
const (
	Collection        = "classifier_runs"
	ArchiveCollection = "classifier_runs_archive"
)

// SchemaVersion is the version of the context layout this code writes and
// reads. A document with another version is refused as corrupt, never
// guessed at.
const SchemaVersion = 1

// Errors of the store.
var (
	// ErrNotFound means no run with that id exists in the scope.
	ErrNotFound = errors.New("run not found")
	// ErrConflict means the checkpoint changed since it was read.
	ErrConflict = errors.New("checkpoint changed concurrently")
	// ErrCorrupt is matched by every *CorruptError.
	ErrCorrupt = errors.New("checkpoint cannot be decoded")
)

// CorruptError is a checkpoint that cannot be decoded. The header fields
// that could be read are kept so the run can be stopped and shown.
type CorruptError struct {
	// ID is the run id.
	ID string
	// State is the state the header names ("" if unreadable).
	State statemachine.State
	// Version is the document version, or -1 if unreadable.
	Version int64
	// StopReason is the header's stop reason, if any.
	StopReason string
	// EventCount is the header's event count (0 if unreadable).
	EventCount uint64
	// CreateTime and UpdateTime are the header's times.
	CreateTime, UpdateTime time.Time
	// Cause says what could not be decoded.
	Cause error
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint of run %s cannot be decoded: %v", e.ID, e.Cause)
}

// Is matches ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// Unwrap returns the cause.
func (e *CorruptError) Unwrap() error { return e.Cause }

// Lease marks the executor driving a run until ExpiresAt.
type Lease struct {
	// Owner identifies the executor (process instance and drive).
	Owner string
	// ExpiresAt is when others may take over.
	ExpiresAt time.Time
}

// Held reports whether the lease is held by someone at now.
func (l *Lease) Held(now time.Time) bool { return l != nil && now.Before(l.ExpiresAt) }

// Record is a decoded checkpoint.
type Record struct {
	// Run is the run context.
	Run statemachine.Run
	// Version is the document version the record was read at.
	Version int64
	// Lease is the current lease, nil if none.
	Lease *Lease
	// LastEventID is the id of the last event written for the run.
	LastEventID string
	// EventCount is how many events were written for the run: the last
	// one's per-run sequence.
	EventCount uint64
}

// Store reads and writes checkpoints. It is safe for concurrent use.
//
// The writes of one run in one process are serialised, together with the
// removals of the events relay serving the collection (give it
// [Store.LockDocument]) and its archiving: FerretDB v1 applies an update
// as a read followed by an unconditional write of the whole document, so
// two concurrent updates of one document lose one of them — a relay's
// $pullAll could undo a checkpoint, and two writers guarded by the same
// version could both succeed. MongoDB updates are atomic; with it the lock
// only orders the writes of a run, which one executor makes anyway.
// Different runs do not wait for each other here (a lock of the whole
// store, held across each write, had a started run's first write wait for
// ~50 other runs' steps under load). Processes sharing one FerretDB are not
// protected against each other (see the package doc); the embedded store
// runs one classifier.
type Store struct {
	coll    *mongo.Collection // runs that can still change
	archive *mongo.Collection // finished runs, events published
	now     func() time.Time
	runs    mongox.Locks // by run id: serialises a run's writes, outbox removals and archiving

	// known is, for a declared single writer, the version and scope of each
	// live run as this store last wrote it: a write at that version needs
	// no read to check it (mongox.UpdateKnownVersion). A run's entry
	// changes only under the run's lock (runs); a write whose outcome is
	// unknown, and archiving, drop the entry, and the next write reads.
	mu    sync.Mutex // guards known, docs, moved and movedBefore
	known map[string]knownRun

	// docs is, for a declared single writer, the document of live runs
	// as this store last wrote them (at most maxDocs), with the outbox
	// entries it wrote that the relay has not reported published: Load
	// reads no run it holds, and a finished run whose every entry is out
	// is archived from it as soon as the relay has published them, before
	// the relay's removal, which it then skips (see published and gone).
	// An entry changes with its run's known entry, under the run's lock.
	docs map[string]*liveDoc
	// moved and movedBefore hold the runs this store archived lately (two
	// generations of at most maxMoved), for the relay's gone.
	moved, movedBefore map[string]bool

	// relay is told of every outbox entry the store writes (NewRelay sets
	// it), under the run's lock, so a single writer's entries reach it in
	// the order of the writes and it need not read them back (see wrote).
	relay *events.Relay

	// finishing holds the runs this store wrote in a finished state and
	// has not archived yet: Drained archives only those, so the relay's
	// notice after every step costs no read, and no wait for mu.
	fmu       sync.Mutex // guards finishing
	finishing map[string]bool

	transitions metric.Int64Counter // runs entering each state

	// creates gathers the new runs Create is asked for while one insert
	// is under way into the next (a burst of starts costs a few commands).
	creates *mongox.Batcher[bson.D]
}

// createBatch is the most new runs Create gathers into one insert.
const createBatch = 64

// knownRun is what a single writer knows of a run it wrote.
type knownRun struct {
	version         int64
	tenant, project string
}

// liveDoc is a single writer's copy of a live run's document.
type liveDoc struct {
	// raw is the document as last written, with an empty outbox: what
	// Load decodes and what the archive keeps.
	raw bson.Raw
	// complete says unpublished holds every entry of the run's outbox:
	// this store created the run and has known every write of it since.
	complete bool
	// unpublished holds the ids of the entries this store wrote that the
	// relay has not reported stored.
	unpublished map[string]bool
}

// Bounds of what a single writer keeps of its runs in memory.
const (
	// maxDocs bounds Store.docs (a run's document is 1-3 KB): past it,
	// one run's copy is dropped for each new one, and reads of that run
	// go to the database.
	maxDocs = 4096
	// maxMoved bounds each generation of Store.moved: the relay asks
	// within a removal delay of the archiving.
	maxMoved = 4096
)

// wrote tells the relay that run id was just written with entries; the
// run's lock is held (or the run is new). A single writer hands the entries over in the order of its
// writes (events.Relay.NotifyEntries); with many writers the relay reads
// the run.
func (s *Store) wrote(id string, entries []events.OutboxEntry) {
	switch {
	case s.relay == nil || len(entries) == 0:
	case mongox.SingleWriter(s.coll.Database()):
		s.relay.NotifyEntries(id, entries...)
	default:
		s.relay.NotifyDocument(id)
	}
}

// unsure tells a single writer's relay about a write of entries to run id
// whose outcome is unknown (it failed, but may have been applied): the
// relay reads the run, since its polls do not sweep the collection
// (events.Relay.SetSingleWriter); the run's lock is held (or the run is
// new). With many writers the relay's sweeps find them.
func (s *Store) unsure(id string, entries []events.OutboxEntry) {
	if s.relay != nil && len(entries) > 0 && mongox.SingleWriter(s.coll.Database()) {
		s.relay.NotifyDocument(id)
	}
}

// maxKnown bounds the runs a single writer remembers (see Store.known):
// runs left waiting for an approval stay live, and past this many the
// store forgets them all, each next write reading its run once.
const maxKnown = 100_000

// learn records, for a single writer, that run id is at version in scope;
// the run's lock is held (or the run is new).
func (s *Store) learn(id string, scope *commonv1.Scope, version int64) {
	if !mongox.SingleWriter(s.coll.Database()) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.known[id]; !ok && len(s.known) >= maxKnown {
		clear(s.known)
	}
	s.known[id] = knownRun{version: version, tenant: scope.GetTenantId(), project: scope.GetProjectId()}
}

// knows reports whether this store wrote run id last, as k says; the
// run's lock is held.
func (s *Store) knows(id string, k knownRun) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	got, ok := s.known[id]
	return ok && got == k
}

// forget drops what this store knows of run id; the run's lock is held.
func (s *Store) forget(id string) {
	s.mu.Lock()
	delete(s.known, id)
	delete(s.docs, id)
	s.mu.Unlock()
}

// keep records, for a single writer, the document of run id as rec says
// it now is, and the entries the write that made it added to its outbox;
// created says that write created the run. The run's lock is held (or the
// run is new). It comes before the relay hears of the entries (wrote), so
// their publication finds them.
func (s *Store) keep(rec Record, entries []events.OutboxEntry, created bool) {
	if !mongox.SingleWriter(s.coll.Database()) {
		return
	}
	d := append(document(rec), bson.E{Key: events.OutboxField, Value: bson.A{}})
	raw, err := bson.Marshal(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	id := rec.Run.ID
	if err != nil {
		delete(s.docs, id) // Load reads it
		return
	}
	doc := s.docs[id]
	if doc == nil {
		if len(s.docs) >= maxDocs {
			for other := range s.docs {
				delete(s.docs, other)
				break
			}
		}
		doc = &liveDoc{complete: created, unpublished: map[string]bool{}}
		s.docs[id] = doc
	}
	doc.raw = raw
	for _, e := range entries {
		doc.unpublished[e.ID] = true
	}
}

// dropDoc drops a single writer's copy of run id's document (a write it
// cannot follow); the run's lock is held.
func (s *Store) dropDoc(id string) {
	s.mu.Lock()
	delete(s.docs, id)
	s.mu.Unlock()
}

// cached returns a single writer's copy of run id's document, if it holds
// one. complete says the copy knows every entry of the run's outbox (see
// liveDoc), and drained that the relay has reported them all published.
func (s *Store) cached(id string) (raw bson.Raw, complete, drained bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	doc := s.docs[id]
	if doc == nil {
		return nil, false, false
	}
	return doc.raw, doc.complete, doc.complete && len(doc.unpublished) == 0
}

// published is the relay's report (events.Relay.SetPublished) that the
// entries ids of run id are stored in JetStream. A single writer's
// finished run whose every entry is out is archived at once, from its
// copy: no read, and the relay's removal that follows is not written.
func (s *Store) published(ctx context.Context, id any, ids []string) error {
	runID, _ := id.(string)
	s.mu.Lock()
	doc := s.docs[runID]
	if doc != nil {
		for _, e := range ids {
			delete(doc.unpublished, e)
		}
	}
	ready := doc != nil && doc.complete && len(doc.unpublished) == 0
	s.mu.Unlock()
	if !ready {
		return nil
	}
	return s.Drained(ctx, runID)
}

// movedOut records that run id left the live collection; the run's lock
// is held.
func (s *Store) movedOut(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.moved) >= maxMoved {
		s.moved, s.movedBefore = map[string]bool{}, s.moved
	}
	s.moved[id] = true
}

// gone reports whether this store archived run id lately (for the relay:
// events.Relay.SetGone): its live document, outbox and all, is deleted,
// so a removal of its published entries would match nothing.
func (s *Store) gone(id any) bool {
	runID, _ := id.(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.moved[runID] || s.movedBefore[runID]
}

// NewStore returns a store on db's checkpoint collections.
func NewStore(db *mongo.Database) *Store {
	s := &Store{coll: db.Collection(Collection), archive: db.Collection(ArchiveCollection), now: time.Now, finishing: map[string]bool{},
		known: map[string]knownRun{}, docs: map[string]*liveDoc{}, moved: map[string]bool{}, transitions: newTransitions()}
	s.creates = mongox.NewBatcher(createBatch, func(ctx context.Context, docs []bson.D) []error {
		return mongox.InsertEach(ctx, s.coll, docs)
	})
	return s
}

// Collection is the collection of runs that can still change: the one
// whose outboxes the events relay serves.
func (s *Store) Collection() *mongo.Collection { return s.coll }

// LockDocument takes run id's write lock and returns its release; the
// events relay holds it while it removes published events from the run
// (events.Relay.SetDocumentLock), so a removal never races a checkpoint
// write.
func (s *Store) LockDocument(id any) (unlock func()) { return s.lockRun(fmt.Sprint(id)) }

// lockRun takes run id's write lock and returns its release.
func (s *Store) lockRun(id string) (unlock func()) { return s.runs.Lock(id) }

// finish notes that run id is being written in a finished state, before
// the write, so the relay's notice that follows it finds the note.
func (s *Store) finish(id string) {
	s.fmu.Lock()
	s.finishing[id] = true
	s.fmu.Unlock()
}

// unfinish drops the note of a finishing write that failed.
func (s *Store) unfinish(id string) {
	s.fmu.Lock()
	delete(s.finishing, id)
	s.fmu.Unlock()
}

// Indexes of both collections (see "Queries and indexes" in the package
// doc). listIndex is made in both writer modes, as its predecessor was;
// the others with many writers only: FerretDB, a single writer's store,
// reads by no index and would only pay for them on every write.
var (
	listIndex      = mongox.Index{Name: "scope_created_id", Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "create_time", Value: -1}, {Key: "_id", Value: 1}}}
	listStateIndex = mongox.Index{Name: "scope_state_created_id", Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "state", Value: 1}, {Key: "create_time", Value: -1}, {Key: "_id", Value: 1}}}
	// finishedIndex serves ArchiveFinished, on the live runs only.
	finishedIndex = mongox.Index{Name: "state", Keys: bson.D{{Key: "state", Value: 1}}}
	// supersededIndexes are dropped at start: listIndex replaces
	// scope_created, which lacked the _id that breaks List's ties.
	supersededIndexes = []string{"scope_created"}
)

// EnsureIndexes creates the store's indexes and drops those they
// superseded; call it at start.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	many := !mongox.SingleWriter(s.coll.Database())
	for _, c := range []*mongo.Collection{s.coll, s.archive} {
		ixs := []mongox.Index{listIndex}
		if many {
			ixs = append(ixs, listStateIndex)
		}
		if many && c == s.coll {
			ixs = append(ixs, finishedIndex, events.OutboxIndex)
		}
		if err := mongox.EnsureIndexes(ctx, c, ixs...); err != nil {
			return err
		}
		if err := mongox.DropIndexes(ctx, c, supersededIndexes...); err != nil {
			return err
		}
	}
	return nil
}

type leaseDoc struct {
	Owner     string    `bson:"owner"`
	ExpiresAt time.Time `bson:"expires_at"`
}

// header is the part of the document read before the context.
type header struct {
	ID            string    `bson:"_id"`
	TenantID      string    `bson:"tenant_id"`
	ProjectID     string    `bson:"project_id"`
	SchemaVersion int       `bson:"schema_version"`
	Version       int64     `bson:"version"`
	State         string    `bson:"state"`
	StopReason    string    `bson:"stop_reason"`
	LastEventID   string    `bson:"last_event_id"`
	EventCount    int64     `bson:"event_count"`
	Lease         *leaseDoc `bson:"lease"`
	CreateTime    time.Time `bson:"create_time"`
	UpdateTime    time.Time `bson:"update_time"`
	Context       bson.Raw  `bson:"context"`
}

func idFilter(scope *commonv1.Scope, id string) bson.D {
	return bson.D{{Key: "_id", Value: id}, {Key: "tenant_id", Value: scope.GetTenantId()}, {Key: "project_id", Value: scope.GetProjectId()}}
}

func toLeaseDoc(l *Lease) *leaseDoc {
	if l == nil {
		return nil
	}
	return &leaseDoc{Owner: l.Owner, ExpiresAt: l.ExpiresAt.UTC()}
}

// lease is the Lease a stored lease stands for, nil for none.
func (l *leaseDoc) lease() *Lease {
	if l == nil {
		return nil
	}
	return &Lease{Owner: l.Owner, ExpiresAt: l.ExpiresAt}
}

func lastID(entries []events.OutboxEntry) string {
	if len(entries) == 0 {
		return ""
	}
	return entries[len(entries)-1].ID
}

// Create inserts a new run at version 1 with its first events (numbered
// from 1) and lease.
func (s *Store) Create(ctx context.Context, run statemachine.Run, lease *Lease, entries []events.OutboxEntry) (Record, error) {
	now := s.now().UTC()
	run.CreateTime, run.UpdateTime = now, now
	if entries == nil {
		entries = []events.OutboxEntry{}
	}
	rec := Record{Run: run, Version: 1, Lease: lease, LastEventID: lastID(entries), EventCount: uint64(len(entries))}
	d := append(document(rec), bson.E{Key: events.OutboxField, Value: entries})
	// A new run: no other write of it can be under way, so no lock.
	if err := s.creates.Do(ctx, d); err != nil {
		s.unsure(run.ID, entries)
		return Record{}, fmt.Errorf("checkpoint: create %s: %w", run.ID, err)
	}
	s.learn(run.ID, &commonv1.Scope{TenantId: run.TenantID, ProjectId: run.ProjectID}, 1)
	s.keep(rec, entries, true)
	s.wrote(run.ID, entries)
	s.entered(ctx, run.State)
	return rec, nil
}

// document is the stored form of rec, without the outbox: what Create
// inserts, and what each later write leaves (Commit and RenewLease set
// the fields they change).
func document(rec Record) bson.D {
	run := rec.Run
	return bson.D{
		{Key: "_id", Value: run.ID},
		{Key: "tenant_id", Value: run.TenantID},
		{Key: "project_id", Value: run.ProjectID},
		{Key: "schema_version", Value: SchemaVersion},
		{Key: "version", Value: rec.Version},
		{Key: "state", Value: string(run.State)},
		{Key: "stop_reason", Value: run.StopReason},
		{Key: "last_event_id", Value: rec.LastEventID},
		{Key: "event_count", Value: int64(rec.EventCount)},
		{Key: "lease", Value: toLeaseDoc(rec.Lease)},
		{Key: "create_time", Value: run.CreateTime},
		{Key: "update_time", Value: run.UpdateTime},
		{Key: "context", Value: encodeContext(run)},
	}
}

// Commit writes run as the new checkpoint of the document read at version,
// with the given lease (nil releases it) and appends entries (numbered from
// rec.EventCount+1) to its outbox, all in one write. It returns the new record, or ErrConflict when the
// document moved past version, ErrNotFound when it does not exist.
func (s *Store) Commit(ctx context.Context, rec Record, run statemachine.Run, lease *Lease, entries []events.OutboxEntry) (Record, error) {
	now := s.now().UTC()
	run.CreateTime = rec.Run.CreateTime
	run.UpdateTime = now
	set := bson.M{
		"state":          string(run.State),
		"stop_reason":    run.StopReason,
		"schema_version": SchemaVersion,
		"context":        encodeContext(run),
		"update_time":    now,
		"lease":          toLeaseDoc(lease),
	}
	last, count := rec.LastEventID, rec.EventCount
	if len(entries) > 0 {
		last, count = lastID(entries), count+uint64(len(entries))
		set["last_event_id"] = last
		set["event_count"] = int64(count)
	}
	update := bson.M{"$set": set}
	if len(entries) > 0 {
		update["$push"] = events.OutboxPush(entries...)
	}
	scope := &commonv1.Scope{TenantId: run.TenantID, ProjectId: run.ProjectID}
	if run.State.Finished() {
		s.finish(run.ID)
	}
	next := Record{Run: run, Version: rec.Version + 1, Lease: lease, LastEventID: last, EventCount: count}
	if err := s.updateVersioned(ctx, scope, run.ID, rec.Version, update, entries, &next); err != nil {
		if run.State.Finished() {
			s.unfinish(run.ID)
		}
		return Record{}, err
	}
	if run.State != rec.Run.State {
		s.entered(ctx, run.State)
	}
	return next, nil
}

// RenewLease extends the lease of the record's run, keeping everything else.
func (s *Store) RenewLease(ctx context.Context, rec Record, lease Lease) (Record, error) {
	scope := &commonv1.Scope{TenantId: rec.Run.TenantID, ProjectId: rec.Run.ProjectID}
	update := bson.M{"$set": bson.M{"lease": toLeaseDoc(&lease)}}
	next := rec
	next.Version++
	next.Lease = &lease
	if err := s.updateVersioned(ctx, scope, rec.Run.ID, rec.Version, update, nil, &next); err != nil {
		return Record{}, err
	}
	return next, nil
}

// updateVersioned writes update to run id at version, and tells the relay
// about the entries it pushed. next is the record the write makes, nil if
// not known (a single writer then reads the run the next time).
func (s *Store) updateVersioned(ctx context.Context, scope *commonv1.Scope, id string, version int64, update bson.M, entries []events.OutboxEntry, next *Record) error {
	unlock := s.lockRun(id)
	var err error
	if s.knows(id, knownRun{version: version, tenant: scope.GetTenantId(), project: scope.GetProjectId()}) {
		err = mongox.UpdateKnownVersion(ctx, s.coll, id, update)
	} else {
		err = mongox.UpdateVersioned(ctx, s.coll, idFilter(scope, id), version, update)
	}
	if err == nil {
		s.learn(id, scope, version+1)
		if next != nil {
			s.keep(*next, entries, false)
		} else {
			s.dropDoc(id)
		}
		s.wrote(id, entries)
	} else {
		s.forget(id)
		s.unsure(id, entries)
	}
	unlock()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongox.ErrConflict):
		return fmt.Errorf("checkpoint: run %s at version %d: %w", id, version, ErrConflict)
	case errors.Is(err, mongox.ErrNotFound):
		return fmt.Errorf("checkpoint: run %s: %w", id, ErrNotFound)
	}
	return fmt.Errorf("checkpoint: write run %s: %w", id, err)
}

// MarkCorrupt stops a run whose checkpoint cannot be decoded: it sets the
// header's state to Stopped with the reason, releases any lease and appends
// the events (numbered from cerr.EventCount+1), leaving the undecodable
// context in place for inspection. It is guarded by the header's version
// when that was readable. It returns the new event count.
func (s *Store) MarkCorrupt(ctx context.Context, scope *commonv1.Scope, cerr *CorruptError, reason string, entries []events.OutboxEntry) (uint64, error) {
	now := s.now().UTC()
	count := cerr.EventCount + uint64(len(entries))
	set := bson.M{
		"state": string(statemachine.Stopped), "stop_reason": reason, "update_time": now,
		"lease": nil, "last_event_id": lastID(entries), "event_count": int64(count),
	}
	update := bson.M{"$set": set, "$push": events.OutboxPush(entries...)}
	s.finish(cerr.ID)
	if err := s.markCorrupt(ctx, scope, cerr, set, update, entries); err != nil {
		s.unfinish(cerr.ID)
		return 0, err
	}
	return count, nil
}

// markCorrupt writes MarkCorrupt's update, guarded by the header's version
// when that was readable.
func (s *Store) markCorrupt(ctx context.Context, scope *commonv1.Scope, cerr *CorruptError, set, update bson.M, entries []events.OutboxEntry) error {
	if cerr.Version >= 0 {
		return s.updateVersioned(ctx, scope, cerr.ID, cerr.Version, update, entries, nil)
	}
	set["version"] = int64(1)
	unlock := s.lockRun(cerr.ID)
	res, err := s.coll.UpdateOne(ctx, idFilter(scope, cerr.ID), update)
	s.forget(cerr.ID)
	switch {
	case err != nil:
		s.unsure(cerr.ID, entries)
	case res.MatchedCount > 0 && s.relay != nil:
		s.relay.NotifyDocument(cerr.ID) // what its outbox holds is not known here: read it
	}
	unlock()
	if err != nil {
		return fmt.Errorf("checkpoint: stop corrupt run %s: %w", cerr.ID, mongox.Translate(err))
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("checkpoint: run %s: %w", cerr.ID, ErrNotFound)
	}
	return nil
}

// Load reads and fully decodes a run. Errors: ErrNotFound, or a
// *CorruptError (matching ErrCorrupt) when any part cannot be decoded.
func (s *Store) Load(ctx context.Context, scope *commonv1.Scope, id string) (Record, error) {
	// By _id alone, with the scope checked here: FerretDB serves only a
	// lone _id filter from its index and decodes every document for any
	// other.
	raw, _, _ := s.cached(id)
	if raw == nil {
		var err error
		if raw, err = s.findRaw(ctx, id); err != nil {
			return Record{}, err
		}
	}
	tenant, _ := raw.Lookup("tenant_id").StringValueOK()
	project, _ := raw.Lookup("project_id").StringValueOK()
	if tenant != scope.GetTenantId() || project != scope.GetProjectId() {
		return Record{}, fmt.Errorf("checkpoint: run %s: %w", id, ErrNotFound)
	}
	return decode(id, raw)
}

// findRaw reads a run's document, without its outbox, from the live
// collection or else the archive.
func (s *Store) findRaw(ctx context.Context, id string) (bson.Raw, error) {
	opts := options.FindOne().SetProjection(bson.D{{Key: events.OutboxField, Value: 0}})
	for _, c := range []*mongo.Collection{s.coll, s.archive} {
		raw, err := c.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint: load %s: %w", id, mongox.Translate(err))
		}
		return raw, nil
	}
	return nil, fmt.Errorf("checkpoint: run %s: %w", id, ErrNotFound)
}

// archiveOutcome is what archiveLocked did.
type archiveOutcome int

const (
	archived    archiveOutcome = iota // moved
	gone                              // not in the live collection
	notFinished                       // the run can still change
	eventsLeft                        // finished, with events not published yet
	changed                           // written by another process while being archived
)

// archiveLocked moves run id to the archive if it is finished and its
// events are all published, and says what it found; the run's lock is
// held. It is
// idempotent: a crash between copying and deleting leaves a copy in each
// collection, which the next call resolves.
//
// The copy replaces any earlier one, and the live document is deleted only
// at the version copied (mongox.DeleteIf: with many writers MongoDB's
// atomic conditional delete, for a single writer a read and a delete by
// _id), so the archive never keeps an older version than the last: a run
// another process wrote meanwhile stays live, where reads find it first,
// until a later call archives it again.
func (s *Store) archiveLocked(ctx context.Context, id string) (archiveOutcome, error) {
	// A single writer's copy that knows the run's every entry is moved
	// once the relay has reported them all published, with no read before
	// or after. (ArchiveFinished drops the copy first: a report missed in
	// a race with a read of the outbox delays the run until then.) A run
	// this store did not create is read.
	raw, complete, drained := s.cached(id)
	if !complete {
		var err error
		raw, err = s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
		if errors.Is(err, mongo.ErrNoDocuments) {
			return gone, nil
		}
		if err != nil {
			return notFinished, fmt.Errorf("checkpoint: archive %s: %w", id, mongox.Translate(err))
		}
		ob, _ := raw.Lookup(events.OutboxField).ArrayOK()
		vals, _ := ob.Values()
		drained = len(vals) == 0
	}
	state, _ := raw.Lookup("state").StringValueOK()
	switch {
	case !statemachine.State(state).Finished():
		return notFinished, nil
	case !drained:
		return eventsLeft, nil
	}
	return s.moveLocked(ctx, id, raw)
}

// moveLocked copies raw, the live document of run id as read, to the
// archive and deletes the live document if it is still at raw's version
// (see archiveLocked); the run's lock is held.
func (s *Store) moveLocked(ctx context.Context, id string, raw bson.Raw) (archiveOutcome, error) {
	version, ok := raw.Lookup("version").AsInt64OK()
	if !ok {
		return notFinished, fmt.Errorf("checkpoint: archive %s: no version", id)
	}
	byID := bson.D{{Key: "_id", Value: id}}
	if _, err := s.archive.ReplaceOne(ctx, byID, raw, options.Replace().SetUpsert(true)); err != nil {
		return eventsLeft, fmt.Errorf("checkpoint: archive %s: %w", id, mongox.Translate(err))
	}
	cond := bson.D{{Key: "version", Value: version}}
	tenant, _ := raw.Lookup("tenant_id").StringValueOK()
	project, _ := raw.Lookup("project_id").StringValueOK()
	if s.knows(id, knownRun{version: version, tenant: tenant, project: project}) {
		// A single writer that wrote this version last (the run's lock is
		// held): nothing to check, so DeleteIf reads nothing.
		cond = nil
	}
	deleted, err := mongox.DeleteIf(ctx, s.coll, id, cond)
	s.forget(id)
	if err != nil {
		return eventsLeft, fmt.Errorf("checkpoint: archive %s: %w", id, err)
	}
	if !deleted {
		return changed, nil
	}
	s.movedOut(id)
	return archived, nil
}

// Drained archives run id if this store wrote it finished; the events
// relay calls it once it has published and removed the run's events
// (events.Relay.SetDrained). Other runs cost nothing. A run that still has
// events waits for the next call; one whose archiving failed is retried by
// ArchiveFinished. A noted run that is not finished yet keeps its note:
// the relay may drain the events of an earlier step while the finishing
// write is on its way (a failed finishing write drops the note itself).
func (s *Store) Drained(ctx context.Context, id any) error {
	runID, _ := id.(string)
	s.fmu.Lock()
	noted := s.finishing[runID]
	s.fmu.Unlock()
	if !noted {
		return nil
	}
	unlock := s.lockRun(runID)
	out, err := s.archiveLocked(ctx, runID)
	unlock()
	if err == nil && (out == archived || out == gone) {
		s.fmu.Lock()
		delete(s.finishing, runID)
		s.fmu.Unlock()
	}
	return err
}

// ArchiveFinished archives every finished run of the live collection whose
// events are all published, and notes the others for Drained: what a
// process that stopped between a run's last events and its archiving left
// behind, or an archiving that failed. Call it at start and now and then.
func (s *Store) ArchiveFinished(ctx context.Context) error {
	f := bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{string(statemachine.Completed), string(statemachine.Stopped)}}}}}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := mongox.FindAll(ctx, s.coll, f, &docs, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}})); err != nil {
		return fmt.Errorf("checkpoint: find finished runs: %w", mongox.Translate(err))
	}
	var errs []error
	for _, d := range docs {
		unlock := s.lockRun(d.ID)
		s.dropDoc(d.ID) // read it: its outbox is the truth
		unlock()
		s.finish(d.ID)
		if err := s.Drained(ctx, d.ID); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// InFlightRun is the header of a live run in a state an executor drives.
type InFlightRun struct {
	// ID is the run.
	ID string
	// Scope is the run's tenant and project.
	Scope *commonv1.Scope
	// State is the state it was checkpointed in.
	State statemachine.State
	// Lease is its executor's lease, nil if none holds it.
	Lease *Lease
}

// InFlight returns every live run in a state an executor drives (neither
// waiting for a human nor finished), header only: the runs a process that
// died or stopped may have left mid-step, which Runner.Recover takes over
// once no live executor holds them.
func (s *Store) InFlight(ctx context.Context) ([]InFlightRun, error) {
	var states bson.A
	for _, st := range statemachine.States {
		if !st.Waiting() && !st.Finished() {
			states = append(states, string(st))
		}
	}
	f := bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: states}}}}
	var docs []header
	proj := bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "state", Value: 1}, {Key: "lease", Value: 1}}
	if err := mongox.FindAll(ctx, s.coll, f, &docs, options.Find().SetProjection(proj)); err != nil {
		return nil, fmt.Errorf("checkpoint: find runs in flight: %w", mongox.Translate(err))
	}
	out := make([]InFlightRun, len(docs))
	for i, d := range docs {
		out[i] = InFlightRun{ID: d.ID, Scope: &commonv1.Scope{TenantId: d.TenantID, ProjectId: d.ProjectID},
			State: statemachine.State(d.State), Lease: d.Lease.lease()}
	}
	return out, nil
}

// ListOptions selects runs.
type ListOptions struct {
	// State, if set, keeps only runs in that state.
	State statemachine.State
	// Offset skips that many runs.
	Offset int64
	// Limit bounds the result.
	Limit int64
	// CreatedFrom and CreatedTo, when not zero, keep runs created at or
	// after CreatedFrom and before CreatedTo.
	CreatedFrom, CreatedTo time.Time
}

// List returns the scope's runs, newest first, from both collections. Runs
// whose checkpoint cannot be decoded are returned as Entry.Corrupt, in
// their place, so a listing never hides them.
func (s *Store) List(ctx context.Context, scope *commonv1.Scope, o ListOptions) ([]Entry, error) {
	f := bson.D{{Key: "tenant_id", Value: scope.GetTenantId()}, {Key: "project_id", Value: scope.GetProjectId()}}
	if o.State != "" {
		f = append(f, bson.E{Key: "state", Value: string(o.State)})
	}
	if created := mongox.TimeRange(o.CreatedFrom, o.CreatedTo); len(created) > 0 {
		f = append(f, bson.E{Key: "create_time", Value: created})
	}
	// Each collection gives its first Offset+Limit; the merge keeps the
	// page. A run being archived may sit in both: the live copy wins.
	opts := options.Find().
		SetProjection(bson.D{{Key: events.OutboxField, Value: 0}}).
		SetSort(bson.D{{Key: "create_time", Value: -1}, {Key: "_id", Value: 1}}).
		SetLimit(o.Offset + o.Limit)
	var all []listed
	seen := map[string]bool{}
	for _, c := range []*mongo.Collection{s.coll, s.archive} {
		var raws []bson.Raw
		if err := mongox.FindAll(ctx, c, f, &raws, opts); err != nil {
			return nil, fmt.Errorf("checkpoint: list: %w", mongox.Translate(err))
		}
		for _, raw := range raws {
			id, _ := raw.Lookup("_id").StringValueOK()
			if seen[id] {
				continue
			}
			seen[id] = true
			created, _ := raw.Lookup("create_time").TimeOK()
			all = append(all, listed{id: id, created: created, raw: raw})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if !all[i].created.Equal(all[j].created) {
			return all[i].created.After(all[j].created)
		}
		return all[i].id < all[j].id
	})
	if int64(len(all)) <= o.Offset {
		return nil, nil
	}
	all = all[o.Offset:min(int64(len(all)), o.Offset+o.Limit)]
	out := make([]Entry, 0, len(all))
	for _, l := range all {
		rec, err := decode(l.id, l.raw)
		var cerr *CorruptError
		switch {
		case errors.As(err, &cerr):
			out = append(out, Entry{Corrupt: cerr})
		case err != nil:
			return nil, err
		default:
			out = append(out, Entry{Record: rec})
		}
	}
	return out, nil
}

// listed is a document found by List, before decoding.
type listed struct {
	id      string
	created time.Time
	raw     bson.Raw
}

// Entry is one listed run: a Record, or Corrupt when it cannot be decoded.
type Entry struct {
	// Record is the decoded run, when Corrupt is nil.
	Record Record
	// Corrupt describes an undecodable checkpoint.
	Corrupt *CorruptError
}
