package conversations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
)

// Collection is the MongoDB collection of conversations.
const Collection = "classifier_conversations"

// importChunk bounds the writes of one bulk request.
const importChunk = 500

// ErrNotFound means a conversation a caller asked for does not exist in the
// scope.
var ErrNotFound = errors.New("conversation not found")

// Store keeps conversations in MongoDB, one document per conversation
// whose _id is made of its scope and id (see key), so a run reads the
// conversations of a batch by exact _id. Every method filters by scope. A
// Store is safe for concurrent use.
//
// # What is read by _id, and what scans
//
// Upsert writes by _id, and Get reads by _id, one conversation per round
// trip (a single writer keeps what it read until its next write): on the
// embedded FerretDB v1 only an exact {_id: x} filter is found without
// parsing every document of the collection, and the collection
// grows with every import. Find runs a plan's filter (the user's query over
// conversations: channel, times, text, metadata) and Count counts a scope:
// both read every document of the collection on FerretDB, and on MongoDB
// use the index scope_id ({tenant_id, project_id, id}) for the scope and
// the order. Their cost follows the conversations imported, not the runs
// made: a run fetches once per plan page, not once per batch, and a single
// writer queries a plan's first page only, keeping the plan's first
// matches for its later pages and for other runs of the same query
// (readCache).
//
// # Queries and indexes (MongoDB)
//
// Every query of the store, and its index (checked by
// TestEveryQueryIsIndexed against the shapes the store sends):
//
//	query                                                  index
//	Upsert, Get, Prepare's moves: {_id}                    _id_
//	Prepare's search: {_id: {$type: "objectId"}}           _id_
//	Get's fallback: {tenant_id, project_id, id: {$in}}     scope_id {tenant_id, project_id, id}
//	Count: {tenant_id, project_id}                         scope_id
//	Find: {tenant_id, project_id} + the plan's filter,     scope_id
//	  id $nin the excluded, sort {id: 1}, limit
//
// Find's plan filter is the user's: what it adds beside the scope is
// applied to the documents scope_id walks in id order, so a plan that
// matches few of a large scope reads much of it; the limit stops the walk
// at a page. What is assumed of MongoDB: the planner serves an equality
// prefix and then the sort from one index (ESR), also when other
// conditions ride along.
//
// # Documents of earlier versions
//
// Earlier versions stored conversations under ObjectID _ids, unique by
// the index scope_id. Prepare, at start, drops that index's uniqueness (the
// _id now carries it) and moves every such document to its key, first
// inserting the copy and then deleting the original, so a crash in between
// leaves both and the next start finishes the move (Find lists an id once
// meanwhile; Count may count it twice). Get falls back to a query by scope
// and id for an id it does not find by key, which covers a document a
// replica of an earlier version writes during a rolling upgrade.
type Store struct {
	coll  *mongo.Collection
	now   func() time.Time
	reads *readCache // single writer only (see readCache)
}

// NewStore returns a store on db's conversations collection.
func NewStore(db *mongo.Database) *Store {
	return &Store{coll: db.Collection(Collection), now: time.Now, reads: newReadCache()}
}

// key is the _id of conversation id in scope: the tenant and the project
// each prefixed with their length, so no two (tenant, project, id) share a
// key whatever characters they contain, e.g. "4:acme/7:support/conv-1".
func key(scope *commonv1.Scope, id string) string {
	t, p := scope.GetTenantId(), scope.GetProjectId()
	return strconv.Itoa(len(t)) + ":" + t + "/" + strconv.Itoa(len(p)) + ":" + p + "/" + id
}

// scopeIndex serves Find's scope and order, Count, and Get's fallback.
var scopeIndex = mongox.Index{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "id", Value: 1}}, Name: "scope_id"}

// Prepare readies the collection at start: it creates the indexes and moves
// documents of earlier versions to their keys (see Store). Several
// processes may run it at once.
func (s *Store) Prepare(ctx context.Context) error {
	if err := s.dropUniqueScopeIndex(ctx); err != nil {
		return err
	}
	if err := mongox.EnsureIndexes(ctx, s.coll, scopeIndex); err != nil {
		return err
	}
	_, err := s.migrate(ctx)
	return err
}

// dropUniqueScopeIndex drops the unique scope_id index of earlier versions,
// which would refuse the copy a move inserts next to its original.
func (s *Store) dropUniqueScopeIndex(ctx context.Context) error {
	specs, err := s.coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("conversations: list indexes: %w", err)
	}
	for _, sp := range specs {
		if sp.Name != scopeIndex.Name || sp.Unique == nil || !*sp.Unique {
			continue
		}
		err := s.coll.Indexes().DropOne(ctx, sp.Name)
		var ce mongo.CommandError
		if err != nil && !(errors.As(err, &ce) && ce.Code == indexNotFound) {
			return fmt.Errorf("conversations: drop unique index %s: %w", sp.Name, err)
		}
	}
	return nil
}

// indexNotFound is the server's code for dropping an index that is gone
// (another process dropped it first).
const indexNotFound = 27

// migrate moves every document stored under an ObjectID to its key and
// returns how many it moved.
func (s *Store) migrate(ctx context.Context) (int, error) {
	s.reads.written()
	defer s.reads.written()
	moved := 0
	for {
		// Each page is moved (and so deleted) before the next is read.
		var page []bson.Raw
		err := mongox.FindAll(ctx, s.coll, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "objectId"}}}}, &page,
			options.Find().SetLimit(migratePage))
		if err != nil {
			return moved, fmt.Errorf("conversations: find documents to move: %w", mongox.Translate(err))
		}
		if len(page) == 0 {
			return moved, nil
		}
		for _, old := range page {
			if err := s.move(ctx, old); err != nil {
				return moved, err
			}
			moved++
		}
	}
}

// migratePage is how many documents migrate reads at a time.
const migratePage = 500

// move stores old, a document under an ObjectID, under its key.
func (s *Store) move(ctx context.Context, old bson.Raw) error {
	var d doc
	if err := bson.Unmarshal(old, &d); err != nil {
		return fmt.Errorf("conversations: move %v: %w", old.Lookup("_id"), err)
	}
	scope := &commonv1.Scope{TenantId: d.TenantID, ProjectId: d.ProjectID}
	moving := bson.D{{Key: "_id", Value: key(scope, d.ID)}}
	elems, err := old.Elements()
	if err != nil {
		return fmt.Errorf("conversations: move %v: %w", old.Lookup("_id"), err)
	}
	for _, e := range elems {
		if e.Key() != "_id" {
			moving = append(moving, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	// A copy already there is newer (written by key) or this move's
	// own, left by a crash: keep it.
	if _, err := s.coll.InsertOne(ctx, moving); err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("conversations: move %s: %w", d.ID, mongox.Translate(err))
	}
	if _, err := s.coll.DeleteOne(ctx, bson.D{{Key: "_id", Value: old.Lookup("_id")}}); err != nil {
		return fmt.Errorf("conversations: move %s: %w", d.ID, mongox.Translate(err))
	}
	return nil
}

// doc is the stored form. Derived fields (message_count, started_at,
// ended_at) exist so plans can query them.
type doc struct {
	Key          any            `bson:"_id"` // key(); an ObjectID in documents of earlier versions
	TenantID     string         `bson:"tenant_id"`
	ProjectID    string         `bson:"project_id"`
	ID           string         `bson:"id"`
	Channel      string         `bson:"channel"`
	Customer     string         `bson:"customer"`
	Messages     []turnDoc      `bson:"messages"`
	MessageCount int            `bson:"message_count"`
	StartedAt    *time.Time     `bson:"started_at,omitempty"`
	EndedAt      *time.Time     `bson:"ended_at,omitempty"`
	Metadata     map[string]any `bson:"metadata,omitempty"`
	ImportedAt   time.Time      `bson:"imported_at"`
}

type turnDoc struct {
	Role string     `bson:"role"`
	Text string     `bson:"text"`
	Time *time.Time `bson:"time,omitempty"`
}

func toDoc(scope *commonv1.Scope, c Conversation, now time.Time) doc {
	d := doc{
		Key:      key(scope, c.ID),
		TenantID: scope.GetTenantId(), ProjectID: scope.GetProjectId(),
		ID: c.ID, Channel: c.Channel, Customer: c.Customer,
		MessageCount: len(c.Messages), Metadata: c.Metadata, ImportedAt: now.UTC(),
	}
	for _, m := range c.Messages {
		t := turnDoc{Role: m.Role, Text: m.Text}
		if !m.Time.IsZero() {
			tm := m.Time.UTC()
			t.Time = &tm
			if d.StartedAt == nil || tm.Before(*d.StartedAt) {
				d.StartedAt = &tm
			}
			if d.EndedAt == nil || tm.After(*d.EndedAt) {
				d.EndedAt = &tm
			}
		}
		d.Messages = append(d.Messages, t)
	}
	return d
}

func (d doc) conversation() Conversation {
	c := Conversation{ID: d.ID, Channel: d.Channel, Customer: d.Customer, Metadata: d.Metadata}
	for _, m := range d.Messages {
		t := Turn{Role: m.Role, Text: m.Text}
		if m.Time != nil {
			t.Time = m.Time.UTC()
		}
		c.Messages = append(c.Messages, t)
	}
	return c
}

func scopeFilter(scope *commonv1.Scope) bson.D {
	return bson.D{{Key: "tenant_id", Value: scope.GetTenantId()}, {Key: "project_id", Value: scope.GetProjectId()}}
}

// Upsert stores the conversations, replacing any with the same id in the
// scope, and returns how many it stored.
func (s *Store) Upsert(ctx context.Context, scope *commonv1.Scope, convs []Conversation) (int, error) {
	s.reads.written()
	defer s.reads.written()
	now := s.now()
	stored := 0
	for start := 0; start < len(convs); start += importChunk {
		end := min(start+importChunk, len(convs))
		models := make([]mongo.WriteModel, 0, end-start)
		for _, c := range convs[start:end] {
			d := toDoc(scope, c, now)
			models = append(models, mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: d.Key}}).SetReplacement(d).SetUpsert(true))
		}
		res, err := s.coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		if err != nil {
			return stored, fmt.Errorf("conversations: import: %w", mongox.Translate(err))
		}
		stored += int(res.MatchedCount + res.UpsertedCount)
	}
	return stored, nil
}

// Count returns how many conversations the scope holds.
func (s *Store) Count(ctx context.Context, scope *commonv1.Scope) (int64, error) {
	n, err := s.coll.CountDocuments(ctx, scopeFilter(scope))
	if err != nil {
		return 0, fmt.Errorf("conversations: count: %w", mongox.Translate(err))
	}
	return n, nil
}

// Find runs a validated plan filter in the scope, skipping the ids in
// exclude, and returns at most limit ids in id order (so a fetch is
// repeatable: a resumed run fetches the same conversations). A single
// writer answers later pages of a filter from the list its first page
// kept (see readCache).
func (s *Store) Find(ctx context.Context, scope *commonv1.Scope, filter bson.D, exclude []string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if !mongox.SingleWriter(s.coll.Database()) {
		ids, _, err := s.find(ctx, scope, filter, exclude, limit)
		return ids, err
	}
	k, err := matchKey(scope, filter)
	if err != nil {
		return nil, fmt.Errorf("conversations: find: %w", err)
	}
	if ids, ok := s.reads.page(k, exclude, limit); ok {
		return ids, nil
	}
	gen := s.reads.generation()
	ids, rows, err := s.find(ctx, scope, filter, nil, matchPrefix+1)
	if err != nil {
		return nil, err
	}
	kept := &matchList{ids: ids, complete: rows <= matchPrefix}
	s.reads.keep(k, kept, gen)
	if page, ok := kept.page(exclude, limit); ok {
		return page, nil
	}
	ids, _, err = s.find(ctx, scope, filter, exclude, limit)
	return ids, err
}

// find queries the filter's matches in the scope not in exclude, at most
// limit documents, and returns their ids in id order and how many
// documents the query returned (a document being moved is there twice).
func (s *Store) find(ctx context.Context, scope *commonv1.Scope, filter bson.D, exclude []string, limit int) ([]string, int, error) {
	clauses := bson.A{scopeFilter(scope)}
	if len(filter) > 0 {
		clauses = append(clauses, filter)
	}
	if len(exclude) > 0 {
		clauses = append(clauses, bson.D{{Key: "id", Value: bson.D{{Key: "$nin", Value: exclude}}}})
	}
	opts := options.Find().
		SetProjection(bson.D{{Key: "id", Value: 1}, {Key: "_id", Value: 0}}).
		SetSort(bson.D{{Key: "id", Value: 1}}).
		SetLimit(int64(limit))
	var rows []struct {
		ID string `bson:"id"`
	}
	if err := mongox.FindAll(ctx, s.coll, bson.D{{Key: "$and", Value: clauses}}, &rows, opts); err != nil {
		return nil, 0, fmt.Errorf("conversations: find: %w", mongox.Translate(err))
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		// A document being moved to its key is there twice (see Store).
		if n := len(ids); n == 0 || ids[n-1] != r.ID {
			ids = append(ids, r.ID)
		}
	}
	return ids, len(rows), nil
}

// Get returns the conversations with the given ids, in the order asked,
// reading each by its key (a single writer keeps those it read: see
// readCache). A missing id is ErrNotFound naming it. The conversations'
// Metadata maps may be shared with later callers: read them only.
func (s *Store) Get(ctx context.Context, scope *commonv1.Scope, ids []string) ([]Conversation, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	single := mongox.SingleWriter(s.coll.Database())
	gen := s.reads.generation()
	byID := make(map[string]doc, len(ids))
	var missing []string
	for _, id := range ids {
		if _, ok := byID[id]; ok {
			continue
		}
		k := key(scope, id)
		if single {
			if d, ok := s.reads.conversation(k); ok {
				byID[id] = d
				continue
			}
		}
		var d doc
		err := s.coll.FindOne(ctx, bson.D{{Key: "_id", Value: k}}).Decode(&d)
		switch {
		case errors.Is(err, mongo.ErrNoDocuments):
			missing = append(missing, id)
		case err != nil:
			return nil, fmt.Errorf("conversations: get: %w", mongox.Translate(err))
		default:
			byID[id] = d
			if single {
				s.reads.keepConversation(k, d, gen)
			}
		}
	}
	if len(missing) > 0 {
		if err := s.getUnmoved(ctx, scope, missing, byID); err != nil {
			return nil, err
		}
	}
	out := make([]Conversation, 0, len(ids))
	for _, id := range ids {
		d, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		out = append(out, d.conversation())
	}
	return out, nil
}

// getUnmoved adds to byID the conversations of ids stored under an
// ObjectID (see Store), by scope and id: a query that scans on FerretDB,
// made only for ids not found by key.
func (s *Store) getUnmoved(ctx context.Context, scope *commonv1.Scope, ids []string, byID map[string]doc) error {
	f := append(scopeFilter(scope), bson.E{Key: "id", Value: bson.D{{Key: "$in", Value: ids}}})
	var docs []doc
	if err := mongox.FindAll(ctx, s.coll, f, &docs); err != nil {
		return fmt.Errorf("conversations: get: %w", mongox.Translate(err))
	}
	for _, d := range docs {
		byID[d.ID] = d
	}
	return nil
}
