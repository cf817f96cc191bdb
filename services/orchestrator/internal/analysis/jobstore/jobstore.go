// Package jobstore stores analysis jobs in MongoDB (or FerretDB v1), one
// document per job, each write a single-document write that carries the
// job's outbox entries with it. It implements analysis.Store and
// translates driver errors to the analysis package's errors.
//
// # Live and archive
//
// Jobs live in two collections. analysis_jobs (the live set) holds every
// job of an analysis that is not finished; it is the only collection that
// is updated, and the one the outbox relay serves. Once an analysis tree
// is finished and its events are published, the engine moves it to
// analysis_jobs_archive (Archive). Reads look in the live set first, then
// in the archive; a write to an archived job (RetryJob) brings it back into
// the live set, whose copy then prevails until the tree is archived again.
//
// The point is to keep the cost of running an analysis independent of the
// history: the live set holds the analyses in flight, not all those ever
// run, and inserting into the archive checks the unique _id index only.
//
// # One writer: the embedded FerretDB
//
// FerretDB v1 (SQLite backend) finds documents by an exact {_id: x} filter
// only (the embedded server indexes that lookup, see testkit), applies any
// other filter in Go after decoding every document, applies an update as an
// unisolated read and write, makes concurrent writers poll with sleeps
// (SQLite's busy handler), and has secondary indexes that serve no query
// while costing every write. When this process is the database's only
// writer (mongox.SingleWriter, which agentmesh up sets for its embedded
// FerretDB) the store therefore:
//   - keeps a mirror of the live set in memory (loaded when it opens) and
//     serves reads of live jobs and version checks from it, and remembers
//     which jobs are archived, with a bounded cache of the recent ones;
//   - updates by _id alone, the version checked against the mirror under
//     the document lock — which the outbox relay's removals take too — so
//     a check and its write, and the writes to one document, never
//     interleave (FerretDB gets one write at a time from mongox's write
//     gate, which serves the writes of requests first: a submission does
//     not queue behind the steps of analyses under way);
//   - knows each live job's document exactly, its outbox included (it
//     inserted, loaded or read it under its lock, and writes every change
//     to it, the relay's removals of relayed entries too: RemoveRelayed,
//     the relay's remover), so an update writes the whole document over
//     the stored one on the embedded server's SQLite file
//     (mongox.ReplaceByID), where FerretDB reads, decodes and encodes the
//     stored document again; a job whose document it does not know (a
//     write's outcome unknown) is updated field by field, and the relay
//     removes its entries itself;
//   - hands the outbox entries of each write to the relay in write order
//     (events.Relay.NotifyEntries), so it need not read them back, and
//     tells it which jobs are archived (Gone), whose relayed entries then
//     need no removal;
//   - holds a claim back (UpdateLazily) for up to LazyDelay, so that the
//     job's result, which usually follows within milliseconds, stores both
//     in one write;
//   - inserts new jobs and archived copies, and deletes an archived
//     tree's live jobs, each call in one transaction on the embedded
//     server's SQLite file (mongox.InsertEach, mongox.DeleteIDs), where
//     FerretDB reads and parses each job before deleting it and decodes
//     and encodes again each one it inserts;
//   - creates no secondary indexes (and drops those the other mode made).
//
// # Many writers: MongoDB, the default
//
// With replicas (any process that is not declared the only writer), every
// read goes to the server, updates are atomic version-checked writes
// ({_id, version}), inserts are unique, the relay reads what it relays, and
// the queries are indexed. This assumes what MongoDB guarantees: a
// single-document update is atomic and a unique index rejects the second
// insert. FerretDB v1 guarantees only the latter between clients, so a
// cluster on FerretDB can lose a racing update.
//
// # Queries and indexes (MongoDB)
//
// Every query of the store and of the relay of its live set, and the index
// New makes for it with many writers (TestEveryQueryIsIndexed checks the
// shapes the store sends against the indexes):
//
//	query                                               collections  index
//	Get, Update, Archive, the relay's reads: {_id, ...}  both         _id_
//	GetMany, Archive's read, the relay's read of the     both         _id_
//	  documents named meanwhile: {_id: {$in: ids}}
//	ListJobs: {tenant_id, project_id[, create_time       both         list {tenant_id, project_id,
//	  range]}, the page key as $or [{create_time $lt},                  create_time: -1, _id: -1}
//	  {create_time, _id $lt}], sort {create_time: -1,
//	  _id: -1}, limit
//	  with a status, a type, a parent: {..., field}     both         list_status, list_type, list_parent
//	                                                                   {tenant_id, project_id, field,
//	                                                                   create_time: -1, _id: -1}
//	Live (recovery sweep): {update_time $lt, _id $gt}   live         stale {_id, update_time}
//	  sort {_id: 1}, limit
//	Lapsed: {status: running, lease_until $lt}          live         lapsed {status, lease_until}
//	  sort {lease_until: 1}, limit
//	relay sweep: {"outbox.0": {$exists: true}} by _id   live         outbox_pending (sparse,
//	                                                                   events.OutboxIndex)
//
// A listing with two filters at once uses the index of one and tests the
// other on the jobs it walks. New drops children and unfinished, which
// earlier versions made for queries the store no longer makes. What is
// assumed of MongoDB: the planner serves equalities, then the sort, then
// ranges from one index (ESR), bounds the page key's $or on the keys it
// walks, and serves {$exists: true} from a sparse index.
package jobstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// Collections the jobs live in.
const (
	// Collection is the live set: unfinished analyses (and finished ones
	// not yet archived). The outbox relay serves it.
	Collection = "analysis_jobs"
	// ArchiveCollection holds finished analyses.
	ArchiveCollection = "analysis_jobs_archive"
)

// Store is the MongoDB implementation of analysis.Store. It is safe for
// concurrent use. Its writes of a document hold mongox.LockDocument, so
// one process never interleaves a version check with another write of the
// document.
type Store struct {
	live    *mongo.Collection
	archive *mongo.Collection
	// mirror is set for a single writer: see the package comment.
	mirror *mirror
	// relay is told about the outbox entries written; set before use.
	relay Relay
	// held are the writes UpdateLazily holds back (single writer), each
	// for lazyDelay (LazyDelay; tests set more).
	held      held
	lazyDelay time.Duration
	// inserts gathers concurrent Inserts into one command.
	inserts *mongox.Batcher[newJob]
	// beforeDelete, if set (tests), runs between Archive's read of the
	// live jobs and its delete of those that move, with many writers.
	beforeDelete func()
	// beforeInsert, if set (tests), runs as a command of inserts begins.
	beforeInsert func()
}

// SoleWriter reports whether this process is the database's only writer
// (it keeps the mirror then): the engine's start-up takes every claim it
// finds for a dead process's (analysis.SoleWriter).
func (s *Store) SoleWriter() bool { return s.mirror != nil }

// Relay is what the store tells about the outbox entries it writes;
// *events.Relay is one.
type Relay interface {
	NotifyDocument(id any)
	NotifyEntries(id any, entries ...events.OutboxEntry)
}

// SetRelay makes the store tell relay about every outbox entry it writes.
// Call it before the first write.
func (s *Store) SetRelay(relay Relay) { s.relay = relay }

// notify tells the relay about outbox entries just written to document id,
// with the document's lock held: for a single writer the relay is given the
// entries in the order of the writes and needs not read them back; with
// many writers it reads the document.
func (s *Store) notify(id string, outbox []events.OutboxEntry) {
	switch {
	case s.relay == nil || len(outbox) == 0:
	case s.mirror != nil:
		s.relay.NotifyEntries(id, outbox...)
	default:
		s.relay.NotifyDocument(id)
	}
}

// unsure tells a single writer's relay about a write of outbox entries to
// document id whose outcome is unknown (it failed, but may have been
// applied): the relay reads the document, since its polls do not sweep
// the collection (events.Relay.SetSingleWriter); the caller holds the
// document's lock. With many writers the relay's sweeps find them.
func (s *Store) unsure(id string, outbox []events.OutboxEntry) {
	if s.relay != nil && len(outbox) > 0 && s.mirror != nil {
		s.relay.NotifyDocument(id)
	}
}

var (
	_ analysis.Store         = (*Store)(nil)
	_ analysis.SoleWriter    = (*Store)(nil)
	_ analysis.LazyUpdater   = (*Store)(nil)
	_ analysis.BatchInserter = (*Store)(nil)
)

// listIndex is the index of ListJobs with the equality filter field, if
// any: the scope, the filter, then the listing's order.
func listIndex(name string, field ...string) mongox.Index {
	keys := bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}}
	for _, f := range field {
		keys = append(keys, bson.E{Key: f, Value: 1})
	}
	return mongox.Index{Name: name, Keys: append(keys, bson.E{Key: "create_time", Value: -1}, bson.E{Key: "_id", Value: -1})}
}

// indexes are the secondary indexes of both collections (many writers
// only): ListJobs, unfiltered and by each of its filters (see the package
// doc).
var indexes = []mongox.Index{
	listIndex("list"),
	listIndex("list_status", "status"),
	listIndex("list_type", "type"),
	listIndex("list_parent", "parent_id"),
}

// liveIndexes are the live set's own (many writers only).
var liveIndexes = []mongox.Index{
	// lapsed serves Lapsed: status equality, then the range and order on
	// lease_until, so the query reads the lapsed running jobs and nothing
	// else.
	{Name: "lapsed", Keys: bson.D{{Key: "status", Value: 1}, {Key: "lease_until", Value: 1}}},
	// stale serves Live: the walk in _id order, with update_time tested
	// on the index's keys, so only the jobs it returns are read.
	{Name: "stale", Keys: bson.D{{Key: "_id", Value: 1}, {Key: "update_time", Value: 1}}},
	// The relay's sweep of the live set.
	events.OutboxIndex,
}

// retiredIndexes were made by earlier versions for queries the store no
// longer makes; they are dropped at start.
var retiredIndexes = []string{"children", "unfinished"}

// New returns a store on db's analysis_jobs and analysis_jobs_archive
// collections after ensuring their indexes. When this process is the
// database's only writer (mongox.SingleWriter: agentmesh up on its embedded
// FerretDB) it drops them instead, since FerretDB uses none of them, and
// loads the mirror of the live set.
func New(ctx context.Context, db *mongo.Database) (*Store, error) {
	s := &Store{live: db.Collection(Collection), archive: db.Collection(ArchiveCollection), lazyDelay: LazyDelay}
	s.inserts = mongox.NewBatcher(insertBatch, s.insertMany)
	single := mongox.SingleWriter(db)
	for _, coll := range []*mongo.Collection{s.live, s.archive} {
		var keep []mongox.Index
		switch {
		case single:
		case coll == s.live:
			keep = slices.Concat(indexes, liveIndexes)
		default:
			keep = indexes
		}
		if err := mongox.EnsureIndexes(ctx, coll, keep...); err != nil {
			return nil, err
		}
		if err := mongox.DropIndexes(ctx, coll, unwanted(keep)...); err != nil {
			return nil, err
		}
	}
	if single {
		var read []jobDoc
		if err := mongox.FindAll(ctx, s.live, bson.D{}, &read); err != nil {
			return nil, translate("load live jobs", err)
		}
		archived, err := archivedIDs(ctx, s.archive)
		if err != nil {
			return nil, err
		}
		jobs := make([]*analysis.Job, len(read))
		var docs []storedDoc
		for i := range read {
			jobs[i] = &read[i].Job
			if d, ok := read[i].stored(); ok {
				docs = append(docs, d)
			}
		}
		s.mirror = newMirror(jobs, docs, archived)
	}
	return s, nil
}

// jobDoc is a live job's whole document, as a single writer reads it into
// its mirror.
type jobDoc struct {
	analysis.Job `bson:",inline"`
	Outbox       []bson.Raw `bson:"outbox,omitempty"`
}

// stored returns d as the mirror keeps it, and whole false, with the job
// alone, if an outbox entry does not decode (one written by another
// version): the relay reports such an entry, and the job's writes go field
// by field.
func (d *jobDoc) stored() (doc storedDoc, whole bool) {
	outbox := make([]events.OutboxEntry, len(d.Outbox))
	for i, raw := range d.Outbox {
		if err := bson.Unmarshal(raw, &outbox[i]); err != nil {
			return storedDoc{job: &d.Job}, false
		}
	}
	return storedDoc{&d.Job, outbox}, true
}

// docOf is the document that stores job j with outbox, encoded: the
// job's fields as bson.Marshal writes them, then the outbox (not through
// a bson.D, which cost a decode and a second encode of every document
// written).
func docOf(j *analysis.Job, outbox []events.OutboxEntry) (bson.Raw, error) {
	raw, err := rawDoc(j)
	if err != nil || len(outbox) == 0 {
		return raw, err
	}
	tail, err := bson.Marshal(bson.D{{Key: events.OutboxField, Value: outbox}})
	if err != nil {
		return nil, fmt.Errorf("jobstore: encode the outbox of %s: %w", j.ID, err)
	}
	// A document is its length (int32), its elements and a 0: the
	// elements of both, under one length.
	doc := make([]byte, 4, len(raw)+len(tail)-5)
	doc = append(doc, raw[4:len(raw)-1]...)
	doc = append(doc, tail[4:]...)
	binary.LittleEndian.PutUint32(doc, uint32(len(doc)))
	return doc, nil
}

// rawDoc encodes a job.
func rawDoc(j *analysis.Job) (bson.Raw, error) {
	raw, err := bson.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("jobstore: encode %s: %w", j.ID, err)
	}
	return raw, nil
}

// unwanted names the store's indexes, current or retired, that are not
// among keep: those the other writer mode or an earlier version made. On
// the embedded FerretDB they cost every write and serve no query.
func unwanted(keep []mongox.Index) []string {
	names := slices.Clone(retiredIndexes)
	for _, ix := range slices.Concat(indexes, liveIndexes) {
		if !slices.ContainsFunc(keep, func(k mongox.Index) bool { return k.Name == ix.Name }) {
			names = append(names, ix.Name)
		}
	}
	return names
}

// archivedIDs returns the ids of the jobs in the archive.
func archivedIDs(ctx context.Context, archive *mongo.Collection) ([]string, error) {
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := mongox.FindAll(ctx, archive, bson.D{}, &docs, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}})); err != nil {
		return nil, translate("load archived ids", err)
	}
	ids := make([]string, len(docs))
	for i, d := range docs {
		ids[i] = d.ID
	}
	return ids, nil
}

// Collection returns the live collection, for the outbox relay.
func (s *Store) Collection() *mongo.Collection { return s.live }

// RelayLock is the lock for the outbox relay of Collection (see
// events.Relay.SetDocumentLock), held while it removes relayed entries
// from a document: the document lock the store's writes take.
func (s *Store) RelayLock(id any) (unlock func()) {
	return mongox.LockDocument(s.live, id)
}

// Gone reports, for the outbox relay of Collection (events.Relay.SetGone),
// whether job id is known to have left the live set: a single writer's
// mirror knows it is archived, so the removal of its relayed entries
// (deleted with it) is not written. With many writers it is always false.
func (s *Store) Gone(id any) bool {
	sid, ok := id.(string)
	return ok && s.mirror != nil && s.mirror.gone(sid)
}

// Insert implements analysis.Store. It reports ErrExists for an id taken in
// the live set; the engine creates jobs only in unfinished analyses, which
// are never archived. Jobs inserted while another insert is under way go
// in the next one together (a burst of submissions costs a few commands,
// not one each).
func (s *Store) Insert(ctx context.Context, j *analysis.Job, outbox ...events.OutboxEntry) error {
	defer mongox.LockDocument(s.live, j.ID)()
	return s.inserts.Do(ctx, newJob{j, outbox})
}

// InsertAll implements analysis.BatchInserter: the jobs go into the live
// set in one unordered insert; a taken id fails that job alone
// (ErrExists).
func (s *Store) InsertAll(ctx context.Context, jobs []*analysis.Job, outboxes [][]events.OutboxEntry) []error {
	ids := make([]string, len(jobs))
	batch := make([]newJob, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
		batch[i] = newJob{j, outboxes[i]}
	}
	defer s.lockJobs(ids)()
	return s.insertMany(ctx, batch)
}

// newJob is a job to insert with its outbox entries.
type newJob struct {
	job    *analysis.Job
	outbox []events.OutboxEntry
}

// insertBatch is the most jobs Insert gathers into one command.
const insertBatch = 64

// insertMany inserts jobs into the live set in one unordered insert and
// returns each one's outcome: a taken id fails that job alone (ErrExists).
// The caller holds the jobs' locks.
func (s *Store) insertMany(ctx context.Context, jobs []newJob) []error {
	if s.beforeInsert != nil {
		s.beforeInsert()
	}
	errs := make([]error, len(jobs))
	docs := make([]any, 0, len(jobs))
	at := make([]int, 0, len(jobs)) // the job of each of docs
	for i, n := range jobs {
		doc, err := docOf(n.job, n.outbox)
		if err != nil {
			errs[i] = err // that job alone
			continue
		}
		docs, at = append(docs, doc), append(at, i)
	}
	for k, err := range mongox.InsertEach(ctx, s.live, docs) {
		errs[at[k]] = translate("insert "+jobs[at[k]].job.ID, err)
	}
	for _, i := range at {
		s.inserted(jobs[i].job, jobs[i].outbox, errs[i])
	}
	return errs
}

// inserted records the outcome err of inserting j with outbox: stored, or
// taken (ErrExists), or unknown; the caller holds j's lock.
func (s *Store) inserted(j *analysis.Job, outbox []events.OutboxEntry, err error) {
	switch {
	case err == nil:
		if s.mirror != nil {
			s.mirror.stored(j, outbox, true)
		}
		s.notify(j.ID, outbox)
	case s.mirror != nil && !errors.Is(err, analysis.ErrExists):
		s.mirror.forget(j.ID) // the outcome is unknown: read it next time
		s.unsure(j.ID, outbox)
	}
}

// lockJobs takes the document locks of ids, in order (so two callers
// never wait for each other), and returns what releases them.
func (s *Store) lockJobs(ids []string) (unlock func()) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	unlocks := make([]func(), len(ids))
	for i, id := range ids {
		unlocks[i] = mongox.LockDocument(s.live, id)
	}
	return func() {
		for _, u := range unlocks {
			u()
		}
	}
}

// Update implements analysis.Store. Updating an archived job brings it back
// into the live set.
func (s *Store) Update(ctx context.Context, j *analysis.Job, version int64, outbox ...events.OutboxEntry) error {
	return s.update(ctx, j, version, outbox, false)
}

// update is Update, or for a single writer with lazy UpdateLazily.
func (s *Store) update(ctx context.Context, j *analysis.Job, version int64, outbox []events.OutboxEntry, lazy bool) error {
	next := *j
	next.Version = version + 1
	unlock := mongox.LockDocument(s.live, j.ID)
	defer unlock()
	var err error
	if s.mirror != nil {
		err = s.updateMirrored(ctx, &next, version, outbox, lazy)
	} else {
		err = s.updateVersioned(ctx, &next, version, outbox)
	}
	if err != nil {
		return err
	}
	j.Version = next.Version
	return nil
}

// updateVersioned stores next if the job is still at version (MongoDB): in
// the live set with one atomic version-checked write, or, if the job is
// archived at that version, by inserting it into the live set again.
func (s *Store) updateVersioned(ctx context.Context, next *analysis.Job, version int64, outbox []events.OutboxEntry) error {
	update, err := updateOf(next, outbox)
	if err != nil {
		return err
	}
	id := next.ID
	res, err := s.live.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}, {Key: "version", Value: version}}, update)
	if err != nil {
		return translate("update "+id, err)
	}
	if res.MatchedCount == 1 {
		s.notify(id, outbox)
		return nil
	}
	n, err := s.live.CountDocuments(ctx, bson.D{{Key: "_id", Value: id}})
	if err != nil {
		return translate("update "+id, err)
	}
	if n > 0 {
		return conflict(id, version)
	}
	return s.revive(ctx, next, version, outbox)
}

// updateMirrored stores next if the job is still at version (FerretDB),
// checking the version against the mirror, or with lazy holds the write
// back (see UpdateLazily); the caller holds the lock.
func (s *Store) updateMirrored(ctx context.Context, next *analysis.Job, version int64, outbox []events.OutboxEntry, lazy bool) error {
	id := next.ID
	cur, err := s.liveJob(ctx, id, true)
	if err != nil {
		return err
	}
	if cur == nil {
		return s.revive(ctx, next, version, outbox)
	}
	if cur.Version != version {
		return conflict(id, version)
	}
	if lazy {
		s.mirror.put(next)
		s.hold(next, outbox)
		return nil
	}
	if w := s.take(id); w != nil {
		// next follows the held write's state: one write stores both,
		// with the entries of both in order.
		outbox = append(w.outbox, outbox...)
	}
	return s.writeMirrored(ctx, next, outbox)
}

// writeMirrored writes next, with outbox pushed, over the live job's
// document by _id and records it in the mirror; on a failure the job
// becomes unknown to the mirror. A document the mirror knows is written
// whole (mongox.ReplaceByID: beneath FerretDB, which reads, decodes and
// encodes the stored document again for an update); another gets an
// update of the job's fields with the entries pushed. The caller holds the
// job's lock.
func (s *Store) writeMirrored(ctx context.Context, next *analysis.Job, outbox []events.OutboxEntry) error {
	id := next.ID
	matched, err := s.writeDoc(ctx, next, outbox)
	if err == nil && !matched {
		err = fmt.Errorf("jobstore: update %s: vanished from the live set", id)
	}
	if err != nil {
		s.mirror.forget(id)
		s.unsure(id, outbox)
		return translate("update "+id, err)
	}
	s.mirror.stored(next, outbox, false)
	s.notify(id, outbox)
	return nil
}

// writeDoc writes next, with outbox pushed, over the live job's document
// by _id, for writeMirrored, and reports whether there was one.
func (s *Store) writeDoc(ctx context.Context, next *analysis.Job, outbox []events.OutboxEntry) (bool, error) {
	if d, known := s.mirror.doc(next.ID); known {
		doc, err := docOf(next, append(d.outbox, outbox...))
		if err != nil {
			return false, err
		}
		return mongox.ReplaceByID(ctx, s.live, next.ID, doc)
	}
	update, err := updateOf(next, outbox)
	if err != nil {
		return false, err
	}
	res, err := s.live.UpdateOne(ctx, bson.D{{Key: "_id", Value: next.ID}}, update)
	if err != nil {
		return false, err
	}
	return res.MatchedCount == 1, nil
}

// Published is the published hook of the outbox relay of Collection
// (events.Relay.SetPublished): a single writer's mirror records which
// entries of a live job are stored in JetStream, so that Archive asks
// its relayed function only about the others (the engine asks JetStream
// for the last message on the job's subject: a request per archived job,
// 2.6% of a loaded mesh's CPU). Others have nothing to record.
func (s *Store) Published(_ context.Context, id any, entryIDs []string) error {
	if sid, ok := id.(string); ok && s.mirror != nil {
		s.mirror.published(sid, entryIDs)
	}
	return nil
}

// RemoveRelayed is the remover of the outbox relay of Collection
// (events.Relay.SetRemover), called under the document's lock: a single
// writer whose mirror knows document id writes it without the relayed
// entries entryIDs (whole, as writeMirrored does, with the job as stored:
// not a write held back) and keeps knowing it. Otherwise it declines, and
// the relay removes them itself.
func (s *Store) RemoveRelayed(ctx context.Context, id any, entryIDs []string) (bool, error) {
	sid, ok := id.(string)
	if !ok || s.mirror == nil {
		return false, nil
	}
	d, known := s.mirror.doc(sid)
	if !known {
		return false, nil
	}
	n := len(d.outbox)
	keep := slices.DeleteFunc(d.outbox, func(e events.OutboxEntry) bool { return slices.Contains(entryIDs, e.ID) })
	if len(keep) == n {
		return true, nil // none left to remove
	}
	// On a failure only the outbox is in doubt (the job's fields are
	// written as stored): the mirror forgets the document, not the job's
	// state, which a write held back may be ahead of.
	doc, err := docOf(d.job, keep)
	if err != nil {
		s.mirror.forgetDoc(sid) // the relay writes the removal itself
		return false, nil
	}
	matched, err := mongox.ReplaceByID(ctx, s.live, sid, doc)
	switch {
	case err != nil:
		s.mirror.forgetDoc(sid)
		return true, translate("remove relayed entries from "+sid, err)
	case !matched:
		s.mirror.forgetDoc(sid) // gone without the mirror knowing: nothing to remove
	default:
		s.mirror.outboxKept(sid, keep)
	}
	return true, nil
}

// revive stores next, a new state of an archived job at version, in the
// live set, where it prevails over the archived copy.
func (s *Store) revive(ctx context.Context, next *analysis.Job, version int64, outbox []events.OutboxEntry) error {
	old, err := s.getArchived(ctx, next.ID)
	if err != nil {
		return err
	}
	if old.Version != version {
		return conflict(next.ID, version)
	}
	err = s.insertMany(ctx, []newJob{{next, outbox}})[0]
	if errors.Is(err, analysis.ErrExists) {
		return conflict(next.ID, version) // revived concurrently
	}
	return err
}

// updateOf is the update that stores next with the outbox entries appended:
// it sets next's fields, and unsets the omitempty ones next leaves empty.
func updateOf(next *analysis.Job, outbox []events.OutboxEntry) (bson.M, error) {
	doc, err := toDoc(next)
	if err != nil {
		return nil, err
	}
	set := make(bson.D, 0, len(doc))
	written := make(map[string]bool, len(doc))
	for _, e := range doc {
		written[e.Key] = true
		if e.Key != "_id" {
			set = append(set, e)
		}
	}
	update := bson.M{"$set": set}
	var unset bson.D
	for _, name := range omitted {
		if !written[name] {
			unset = append(unset, bson.E{Key: name, Value: ""})
		}
	}
	if len(unset) > 0 {
		update["$unset"] = unset
	}
	if len(outbox) > 0 {
		update["$push"] = events.OutboxPush(outbox...)
	}
	return update, nil
}

func conflict(id string, version int64) error {
	return fmt.Errorf("jobstore: update %s at version %d: %w", id, version, analysis.ErrConflict)
}

// Get implements analysis.Store: the live copy of the job, else the
// archived one. It selects by _id alone and checks the scope in Go.
func (s *Store) Get(ctx context.Context, tenant, project, id string) (*analysis.Job, error) {
	j, err := s.liveJob(ctx, id, false)
	if err == nil && j == nil {
		j, err = s.getArchived(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	if j.Tenant != tenant || j.Project != project {
		return nil, fmt.Errorf("jobstore: get %s: %w", id, analysis.ErrNotFound)
	}
	return j, nil
}

// GetMany implements analysis.Store. With many writers it reads the live
// set for every id in one query ({_id: {$in: ids}}, the _id index on
// MongoDB), then the archive for those not live; a single writer reads each
// by _id alone (from its mirror, mostly), since FerretDB answers an $in by
// reading the whole collection.
func (s *Store) GetMany(ctx context.Context, tenant, project string, ids []string) ([]*analysis.Job, error) {
	out := make([]*analysis.Job, len(ids))
	if s.mirror != nil || len(ids) < 2 {
		for i, id := range ids {
			j, err := s.Get(ctx, tenant, project, id)
			if errors.Is(err, analysis.ErrNotFound) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[i] = j
		}
		return out, nil
	}
	found := make(map[string]*analysis.Job, len(ids))
	// The live set first, as Get reads it: a job archived meanwhile is in
	// the archive before it leaves the live set.
	missing := ids
	for _, coll := range []*mongo.Collection{s.live, s.archive} {
		if len(missing) == 0 {
			break
		}
		jobs, err := s.find(ctx, coll, "get many", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: missing}}}},
			options.Find().SetProjection(noOutbox))
		if err != nil {
			return nil, err
		}
		for _, j := range jobs {
			found[j.ID] = j
		}
		missing = slices.DeleteFunc(slices.Clone(missing), func(id string) bool { return found[id] != nil })
	}
	for i, id := range ids {
		if j := found[id]; j != nil && j.Tenant == tenant && j.Project == project {
			out[i] = j
		}
	}
	return out, nil
}

// Unrelayed implements analysis.UnrelayedReader: the job events the
// outboxes of live jobs ids (of the scope) still hold, in the order asked,
// that the relay has not reported stored. It reads them as the archiver
// does (liveOutboxes, pendingOf): a single writer from its mirror, or by
// _id; with many writers in one query. A job not live holds none.
func (s *Store) Unrelayed(ctx context.Context, tenant, project string, ids []string) ([]events.OutboxEntry, error) {
	const op = "read outboxes"
	read, err := s.liveOutboxes(ctx, op, ids)
	if err != nil {
		return nil, err
	}
	var entries []events.OutboxEntry
	for _, id := range ids {
		st, found, err := s.pendingOf(ctx, op, read, id)
		if err != nil {
			return nil, err
		}
		if !found || st.Tenant != tenant || st.Project != project {
			continue
		}
		for _, e := range st.Outbox {
			if strings.HasPrefix(e.Subject, events.EventSubjectPrefix) {
				entries = append(entries, e)
			}
		}
	}
	return entries, nil
}

// liveJob returns the live copy of job id, or nil if it is not live;
// locked says the caller holds the job's lock.
func (s *Store) liveJob(ctx context.Context, id string, locked bool) (*analysis.Job, error) {
	if s.mirror == nil {
		j, err := findOne(ctx, s.live, id)
		if errors.Is(err, analysis.ErrNotFound) {
			return nil, nil
		}
		return j, err
	}
	if j, known := s.mirror.live(id); known && (j == nil || !locked || s.mirror.knowsDoc(id)) {
		return j, nil
	}
	// A single writer holding the lock reads the whole document, outbox
	// included: its mirror then knows the document again, so the job's
	// next writes are whole. (Unlocked, the relay may be removing entries
	// meanwhile, which no version shows.)
	var d jobDoc
	opts := options.FindOne()
	if !locked {
		opts.SetProjection(noOutbox)
	}
	err := s.live.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		s.mirror.learned(id, storedDoc{}, locked)
	case err != nil:
		return nil, translate("get "+id, err)
	default:
		stored, whole := d.stored()
		s.mirror.learned(id, stored, locked && whole)
	}
	// The mirror knows the job now (live or not): a write held back is
	// ahead of the document.
	j, _ := s.mirror.live(id)
	return j, nil
}

// getArchived returns the archived copy of job id (ErrNotFound if none).
func (s *Store) getArchived(ctx context.Context, id string) (*analysis.Job, error) {
	if s.mirror != nil {
		j, maybe := s.mirror.archivedJob(id)
		if j != nil {
			return j, nil
		}
		if !maybe {
			return nil, fmt.Errorf("jobstore: get %s: %w", id, analysis.ErrNotFound)
		}
	}
	j, err := findOne(ctx, s.archive, id)
	if err != nil {
		return nil, err
	}
	if s.mirror != nil {
		s.mirror.archivedRead(j)
	}
	return j, nil
}

// findOne reads job id from coll by _id alone.
func findOne(ctx context.Context, coll *mongo.Collection, id string) (*analysis.Job, error) {
	var j analysis.Job
	err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(noOutbox)).Decode(&j)
	if err != nil {
		return nil, translate("get "+id, err)
	}
	return &j, nil
}

// List implements analysis.Store over the live set and the archive. The
// continuation key is "<create time in ms>|<id>" of the last job returned.
func (s *Store) List(ctx context.Context, q analysis.ListQuery) ([]*analysis.Job, string, error) {
	filter := bson.D{{Key: "tenant_id", Value: q.Tenant}, {Key: "project_id", Value: q.Project}}
	if q.Status != "" {
		filter = append(filter, bson.E{Key: "status", Value: q.Status})
	}
	if q.Type != "" {
		filter = append(filter, bson.E{Key: "type", Value: q.Type})
	}
	if q.ParentID != "" {
		filter = append(filter, bson.E{Key: "parent_id", Value: q.ParentID})
	}
	timeRange := bson.D{}
	if !q.From.IsZero() {
		timeRange = append(timeRange, bson.E{Key: "$gte", Value: q.From})
	}
	if !q.To.IsZero() {
		timeRange = append(timeRange, bson.E{Key: "$lt", Value: q.To})
	}
	if len(timeRange) > 0 {
		filter = append(filter, bson.E{Key: "create_time", Value: timeRange})
	}
	after := q.After
	if after != "" {
		if _, _, err := parseKey(after); err != nil {
			return nil, "", err
		}
	}
	limit := max(q.Limit, 1)

	jobs, err := s.page(ctx, s.live, filter, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	// Archived jobs, less those with a live copy (which prevails, matching
	// the filter or not) or just listed from the live set (archived since),
	// until limit+1 are found or the archive is done. The live set is read
	// first so that a job being archived meanwhile is not missed.
	listed := make(map[string]bool, len(jobs))
	for _, j := range jobs {
		listed[j.ID] = true
	}
	for archAfter := after; ; {
		batch, err := s.page(ctx, s.archive, filter, archAfter, limit+1)
		if err != nil {
			return nil, "", err
		}
		live, err := s.liveIDs(ctx, batch)
		if err != nil {
			return nil, "", err
		}
		n := 0
		for _, j := range batch {
			if !live[j.ID] && !listed[j.ID] {
				jobs = append(jobs, j)
				n++
			}
		}
		if n == len(batch) || len(batch) < limit+1 {
			break
		}
		archAfter = keyOf(batch[len(batch)-1])
	}
	slices.SortFunc(jobs, func(a, b *analysis.Job) int {
		if c := b.CreateTime.Compare(a.CreateTime); c != 0 {
			return c
		}
		return cmp.Compare(b.ID, a.ID)
	})
	if len(jobs) <= limit {
		return jobs, "", nil
	}
	jobs = jobs[:limit]
	return jobs, keyOf(jobs[limit-1]), nil
}

// newestFirst is the jobs' listing order.
var newestFirst = mongox.Keyset{Field: "create_time", Descending: true}

// page returns up to n jobs of coll matching filter that sort after the
// continuation key, newest first.
func (s *Store) page(ctx context.Context, coll *mongo.Collection, filter bson.D, after string, n int) ([]*analysis.Job, error) {
	if after != "" {
		t, id, err := parseKey(after)
		if err != nil {
			return nil, err
		}
		filter = append(slices.Clip(filter), newestFirst.After(t, id))
	}
	opts := options.Find().SetSort(newestFirst.Sort()).
		SetLimit(int64(n)).SetProjection(noOutbox)
	return s.find(ctx, coll, "list", filter, opts)
}

// liveIDs reports which of jobs have a copy in the live set.
func (s *Store) liveIDs(ctx context.Context, jobs []*analysis.Job) (map[string]bool, error) {
	out := map[string]bool{}
	if len(jobs) == 0 {
		return out, nil
	}
	ids := make(bson.A, 0, len(jobs))
	for _, j := range jobs {
		if s.mirror != nil {
			if lj, known := s.mirror.live(j.ID); known {
				out[j.ID] = lj != nil
				continue
			}
		}
		ids = append(ids, j.ID)
	}
	if len(ids) == 0 {
		return out, nil
	}
	found, err := s.find(ctx, s.live, "list", bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return nil, err
	}
	for _, j := range found {
		out[j.ID] = true
	}
	return out, nil
}

// keyOf is the continuation key after j.
func keyOf(j *analysis.Job) string {
	return strconv.FormatInt(j.CreateTime.UnixMilli(), 10) + "|" + j.ID
}

// Live implements analysis.Store.
func (s *Store) Live(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*analysis.Job, error) {
	limit = max(limit, 1)
	if s.mirror != nil {
		return s.liveMirrored(ctx, updatedBefore, afterID, limit)
	}
	filter := bson.D{{Key: "update_time", Value: bson.D{{Key: "$lt", Value: updatedBefore}}}}
	if afterID != "" {
		filter = append(filter, bson.E{Key: "_id", Value: bson.D{{Key: "$gt", Value: afterID}}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(limit)).SetProjection(noOutbox)
	return s.find(ctx, s.live, "live jobs", filter, opts)
}

// liveMirrored is Live from the mirror; jobs in an unknown state are read.
func (s *Store) liveMirrored(ctx context.Context, updatedBefore time.Time, afterID string, limit int) ([]*analysis.Job, error) {
	jobs, unknown := s.mirror.liveBefore(updatedBefore, afterID, limit)
	if len(unknown) == 0 {
		return jobs, nil
	}
	for _, id := range unknown {
		j, err := s.liveJob(ctx, id, false)
		if err != nil {
			return nil, err
		}
		if j != nil && j.UpdateTime.Before(updatedBefore) {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *analysis.Job) int { return cmp.Compare(a.ID, b.ID) })
	if len(jobs) > limit {
		jobs = jobs[:limit]
	}
	return jobs, nil
}

// Lapsed implements analysis.Store: on MongoDB one query served by the
// live set's "lapsed" index {status, lease_until}; for a single writer a
// look at the mirror (jobs in an unknown state are read).
func (s *Store) Lapsed(ctx context.Context, now time.Time, limit int) ([]*analysis.Job, error) {
	limit = max(limit, 1)
	if s.mirror == nil {
		filter := bson.D{{Key: "status", Value: analysis.StatusRunning}, {Key: "lease_until", Value: bson.D{{Key: "$lt", Value: now}}}}
		opts := options.Find().SetSort(bson.D{{Key: "lease_until", Value: 1}}).SetLimit(int64(limit)).SetProjection(noOutbox)
		return s.find(ctx, s.live, "lapsed jobs", filter, opts)
	}
	jobs, unknown := s.mirror.lapsed(now)
	for _, id := range unknown {
		j, err := s.liveJob(ctx, id, false)
		if err != nil {
			return nil, err
		}
		if lapsed(j, now) {
			jobs = append(jobs, j)
		}
	}
	slices.SortFunc(jobs, func(a, b *analysis.Job) int { return a.LeaseUntil.Compare(*b.LeaseUntil) })
	if len(jobs) > limit {
		jobs = jobs[:limit]
	}
	return jobs, nil
}

// lapsed reports whether j runs under a claim that ended before now.
func lapsed(j *analysis.Job, now time.Time) bool {
	return j != nil && j.Status == analysis.StatusRunning && j.LeaseUntil != nil && j.LeaseUntil.Before(now)
}

// Archive implements analysis.Store. The jobs of the trees that may move
// are copied to the archive in one command, then removed from the live set,
// each only if it is still at the version given (by the delete's filter on
// MongoDB, under the document locks on FerretDB, in one command); as every
// write bumps the version, its outbox then holds nothing but entries
// checked with relayed. A job left in both collections is harmless: reads
// prefer the live copy.
func (s *Store) Archive(ctx context.Context, trees [][]*analysis.Job, relayed func([]events.OutboxEntry) bool) ([]bool, error) {
	var ids []string
	for _, tree := range trees {
		for _, j := range tree {
			ids = append(ids, j.ID)
		}
	}
	defer s.lockJobs(ids)()

	done := make([]bool, len(trees))
	var (
		moving []*analysis.Job
		treeOf []int // the tree of each of moving
	)
	read, err := s.liveOutboxes(ctx, "archive", ids)
	if err != nil {
		return done, err
	}
	for t, tree := range trees {
		jobs, ok, err := s.movable(ctx, tree, read, relayed)
		if err != nil {
			return done, err
		}
		if !ok {
			continue
		}
		if len(jobs) == 0 {
			done[t] = true
			continue
		}
		moving = append(moving, jobs...)
		for range jobs {
			treeOf = append(treeOf, t)
		}
	}
	if len(moving) == 0 {
		return done, nil
	}
	if err := s.insertArchive(ctx, moving); err != nil {
		return done, err
	}
	// A single writer deletes them by _id alone, all in one statement on
	// the embedded FerretDB (mongox.DeleteIDs; through FerretDB each
	// delete by _id reads and parses its document first, and a
	// {_id: {$in: ids}} filter parses the whole live collection). The
	// locks keep the jobs as checked.
	if s.mirror != nil {
		ids := make([]any, 0, len(moving))
		for _, j := range moving {
			ids = append(ids, j.ID)
			// Archived in the mirror before the live copy goes: List reads
			// the live set, then the archive, and takes the mirror's word
			// on which archived jobs are live, so a mirror updated after
			// the delete let a List in between find the job in neither.
			s.mirror.archivedNow(j)
		}
		deleted, err := mongox.DeleteIDs(ctx, s.live, ids)
		if err == nil && deleted != int64(len(moving)) {
			// Nothing else deletes live jobs, and their locks are held:
			// say so rather than retry in silence.
			err = fmt.Errorf("deleted %d of the %d jobs moved from the live set", deleted, len(moving))
		}
		if err != nil {
			for _, j := range moving {
				s.mirror.forget(j.ID) // read what became of it; its tree is offered again
			}
			return done, translate("archive", err)
		}
		for _, t := range treeOf {
			done[t] = true
		}
		return done, nil
	}
	// With many writers one command of deletes, each by _id and version;
	// if some were not deleted (written meanwhile), one read says which.
	deletes := make([]mongo.WriteModel, 0, len(moving))
	for _, j := range moving {
		deletes = append(deletes, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: j.ID}, {Key: "version", Value: j.Version}}))
	}
	if s.beforeDelete != nil {
		s.beforeDelete()
	}
	res, err := s.live.BulkWrite(ctx, deletes, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return done, translate("archive", err)
	}
	left := make([]int, len(trees)) // jobs of each tree not deleted
	if res.DeletedCount != int64(len(moving)) {
		movingIDs := make([]string, len(moving))
		for i, j := range moving {
			movingIDs[i] = j.ID
		}
		still, err := s.liveOutboxes(ctx, "archive", movingIDs)
		if err != nil {
			return done, err
		}
		for i, j := range moving {
			if _, ok := still[j.ID]; ok {
				left[treeOf[i]]++ // written since it was read
			}
		}
	}
	for _, t := range treeOf {
		done[t] = left[t] == 0
	}
	return done, nil
}

// movable returns the live jobs of a tree to move to the archive, and
// whether the tree may move: nothing moves unless every job is unchanged
// and relayed. read holds the live state of the tree's jobs with many
// writers (liveOutboxes); a single writer looks each up (liveOutbox), in
// the order given: the caller puts first the analysis, written last, so a
// tree not relayed yet costs one look. The caller holds the jobs' locks.
func (s *Store) movable(ctx context.Context, tree []*analysis.Job, read map[string]liveState, relayed func([]events.OutboxEntry) bool) ([]*analysis.Job, bool, error) {
	var moving []*analysis.Job
	for _, j := range tree {
		st, found, err := s.pendingOf(ctx, "archive", read, j.ID)
		if err != nil {
			return nil, false, err
		}
		if !found {
			continue // archived already
		}
		if st.Version != j.Version || s.isHeld(j.ID) {
			return nil, false, nil // written since it was read, or not written yet
		}
		if !relayed(st.Outbox) {
			return nil, false, nil
		}
		moving = append(moving, j)
	}
	return moving, true, nil
}

// liveState is a live job's version and the entries its outbox may hold,
// as read with liveStateProjection.
type liveState struct {
	ID      string               `bson:"_id"`
	Tenant  string               `bson:"tenant_id"`
	Project string               `bson:"project_id"`
	Version int64                `bson:"version"`
	Outbox  []events.OutboxEntry `bson:"outbox"`
}

// liveStateProjection reads a liveState.
var liveStateProjection = bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "version", Value: 1}, {Key: events.OutboxField, Value: 1}}

// liveOutboxes returns, with many writers, the state of each live job of
// ids, read in one query ({_id: {$in: ids}}); a job not live has none. A
// single writer gets nil: it looks each up (liveOutbox), since FerretDB
// answers an $in by reading the whole collection.
func (s *Store) liveOutboxes(ctx context.Context, op string, ids []string) (map[string]liveState, error) {
	if s.mirror != nil {
		return nil, nil
	}
	var docs []liveState
	err := mongox.FindAll(ctx, s.live, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}}, &docs,
		options.Find().SetProjection(liveStateProjection))
	if err != nil {
		return nil, translate(op, err)
	}
	out := make(map[string]liveState, len(docs))
	for _, d := range docs {
		out[d.ID] = d
	}
	return out, nil
}

// pendingOf returns the state of live job id (found false if it is not
// live), from read (liveOutboxes) unless it is nil, with in its outbox
// only the entries the relay has not reported stored. op names the
// operation in an error.
func (s *Store) pendingOf(ctx context.Context, op string, read map[string]liveState, id string) (st liveState, found bool, err error) {
	if read != nil {
		st, found = read[id]
	} else if st, found, err = s.liveOutbox(ctx, op, id); err != nil {
		return liveState{}, false, err
	}
	if found && s.mirror != nil {
		st.Outbox = s.mirror.unrelayed(id, st.Outbox)
	}
	return st, found, nil
}

// liveOutbox returns the state of live job id (found false if it is not
// live): from the mirror on FerretDB when it knows the document's outbox,
// else from a read.
func (s *Store) liveOutbox(ctx context.Context, op, id string) (st liveState, found bool, err error) {
	if s.mirror != nil {
		if j, entries, known := s.mirror.outbox(id); known {
			if j == nil {
				return liveState{}, false, nil
			}
			return liveState{ID: id, Tenant: j.Tenant, Project: j.Project, Version: j.Version, Outbox: entries}, true, nil
		}
	}
	err = s.live.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(liveStateProjection)).Decode(&st)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return liveState{}, false, nil
	}
	if err != nil {
		return liveState{}, false, translate(op+" "+id, err)
	}
	return st, true, nil
}

// insertArchive stores copies of jobs in the archive, replacing older
// copies of the same jobs (archived before a retry).
func (s *Store) insertArchive(ctx context.Context, jobs []*analysis.Job) error {
	copies := make([]any, 0, len(jobs))
	for _, j := range jobs {
		doc, err := rawDoc(j)
		if err != nil {
			return err
		}
		copies = append(copies, doc)
	}
	errs := mongox.InsertEach(ctx, s.archive, copies)
	if s.mirror != nil {
		s.mirror.mayBeArchived(jobs) // even on failure: some may be stored
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, mongox.ErrDuplicate) {
			return translate("archive", err)
		}
		if _, err := mongox.ReplaceByID(ctx, s.archive, jobs[i].ID, copies[i]); err != nil {
			return translate("archive "+jobs[i].ID, err)
		}
	}
	return nil
}

// noOutbox keeps pending events out of reads.
var noOutbox = bson.D{{Key: events.OutboxField, Value: 0}}

func (s *Store) find(ctx context.Context, coll *mongo.Collection, op string, filter bson.D, opts *options.FindOptionsBuilder) ([]*analysis.Job, error) {
	var jobs []*analysis.Job
	if err := mongox.FindAll(ctx, coll, filter, &jobs, opts); err != nil {
		return nil, translate(op, err)
	}
	return jobs, nil
}

// omitted are the job's omitempty fields: stored only when not empty.
var omitted = func() []string {
	var out []string
	t := reflect.TypeFor[analysis.Job]()
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("bson"), ",")
		if slices.Contains(strings.Split(opts, ","), "omitempty") {
			out = append(out, name)
		}
	}
	return out
}()

// toDoc encodes a job as an ordered document.
func toDoc(j *analysis.Job) (bson.D, error) {
	raw, err := rawDoc(j)
	if err != nil {
		return nil, err
	}
	var doc bson.D
	if err := bson.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("jobstore: encode %s: %w", j.ID, err)
	}
	return doc, nil
}

// parseKey splits a continuation key.
func parseKey(key string) (time.Time, string, error) {
	ms, id, ok := strings.Cut(key, "|")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return time.Time{}, "", fmt.Errorf("jobstore: malformed continuation key: %w", &analysis.FieldError{Field: "page_token", Reason: "malformed"})
	}
	return time.UnixMilli(n).UTC(), id, nil
}

// translate maps driver errors to the analysis errors.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	err = mongox.Translate(err)
	switch {
	case errors.Is(err, mongox.ErrNotFound):
		return fmt.Errorf("jobstore: %s: %w", op, analysis.ErrNotFound)
	case errors.Is(err, mongox.ErrDuplicate):
		return fmt.Errorf("jobstore: %s: %w", op, analysis.ErrExists)
	}
	return fmt.Errorf("jobstore: %s: %w", op, err)
}
