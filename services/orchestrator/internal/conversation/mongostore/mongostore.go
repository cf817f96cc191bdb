// Package mongostore keeps conversations in MongoDB or the embedded FerretDB:
// one document per conversation in "conversations", one per message in
// "conversation_messages", one per turn lease in "conversation_leases", one
// cache of each conversation's latest messages in "conversation_windows",
// and one record per delete not yet finished everywhere in
// "conversation_deletions" (conversation.DeletionLog).
//
// Two facts about FerretDB v1 (SQLite backend) shape it, and the design
// holds on MongoDB as well:
//
//   - FerretDB uses no index for reads. A filter that is exactly
//     {_id: <string>} is evaluated inside SQLite, scanning the table in C;
//     any other filter is evaluated in Go after decoding every document of
//     the collection, orders of magnitude slower. So everything a turn does
//     is an _id lookup or write, and documents read often stay small:
//     messages have the _id "<conversation>/<seq>", leases
//     "<conversation>/lease/<gen>", and a conversation's latest messages are
//     cached in one window document, so the rolling window costs one read.
//     Only ListConversations, GetConversation of a long conversation,
//     DeleteConversation and FinishDeletions query by other fields
//     (indexed on MongoDB; the deletions are a handful at most).
//   - An update is a read followed by a write, so two clients racing on
//     "update where version = n" can both match (storetest's LeaseRace
//     catches exactly that). Mutual exclusion therefore rests on unique _id
//     inserts only: the turn lease is taken by inserting its next
//     generation, and a message's _id carries its sequence number, so a
//     holder whose lease was taken over cannot interleave its writes with
//     the new holder's. Every other document has one writer at a time: the
//     lease holder. A single writer (mongox.SingleWriter) keeps its leases
//     in memory: no other process writes, and the one that replaces it
//     takes any lease it finds as free, so a lease written would serve
//     nobody. It also writes a conversation's update time up to a second
//     after a turn ends, once for all the turns of that second (touches).
//
// # Queries and indexes (MongoDB)
//
// Every query of the store and the index New makes for it, in both writer
// modes (TestEveryQueryIsIndexed runs the store suite and checks the
// shapes it sends against the indexes):
//
//	query                                               collection              index
//	turns: reads and writes by _id                      all four                _id_
//	List: {tenant_id, project_id}, the page token as    conversations           scope_created
//	  $or [{create_time $lt}, {create_time, _id $lt}],                            {tenant_id, project_id, create_time: -1, _id: -1}
//	  sort {create_time: -1, _id: -1}, limit
//	List by caller: {..., caller}, same                 conversations           scope_caller_created
//	                                                                              {tenant_id, project_id, caller, create_time: -1, _id: -1}
//	Messages past the window: {conversation_id}         conversation_messages   conversation_seq {conversation_id, seq}
//	  sort {seq: 1} or {seq: -1} with a limit
//	Delete: {conversation_id}                           conversation_messages   conversation_seq
//	Delete: {conversation_id}                           conversation_leases     conversation {conversation_id}
//	Delete: record, drop by _id                         conversation_deletions  _id_
//	FinishDeletions: {create_time $lt}, sort            conversation_deletions  created {create_time: 1}
//	  {create_time: 1}, limit
//
// What is assumed of MongoDB: the planner serves the equalities and then
// the sort from one index (ESR), and bounds the page token's $or on the
// index keys it walks in order, stopping at the limit.
package mongostore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"golang.org/x/sync/errgroup"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

var _ conversation.Store = (*Store)(nil)

// Collection names.
const (
	ConversationsCollection = "conversations"
	MessagesCollection      = "conversation_messages"
	LeasesCollection        = "conversation_leases"
	WindowsCollection       = "conversation_windows"
	DeletionsCollection     = "conversation_deletions"
)

// DefaultRecentSize is how many of its latest messages a conversation's
// window document caches unless Options say otherwise.
const DefaultRecentSize = 32

// Options tune a Store.
type Options struct {
	// RecentSize is how many latest messages the window document caches; a
	// rolling window up to this size costs no message query.
	// 0 means DefaultRecentSize.
	RecentSize int
	// Logger hears of a single writer's background writes of update times
	// that fail (they are tried again every second) and of their recovery.
	// nil discards.
	Logger *slog.Logger
}

// Store is a conversation.Store on MongoDB. It is safe for concurrent use.
type Store struct {
	convs   *mongo.Collection
	msgs    *mongo.Collection
	leases  *mongo.Collection
	windows *mongo.Collection
	// deletions records deletes until what they leave elsewhere is gone.
	deletions *mongo.Collection
	recent    int

	// single is set when this process is the database's only writer
	// (mongox.SingleWriter): it then reads messages by _id only.
	single bool
	// writer names this store in the leases it takes. A single writer
	// takes a lease another writer took as free: that writer was the
	// process this one replaced (killed or stopped), so its turn is not
	// running, and the conversation takes messages again at once rather
	// than when the lease lapses.
	writer string

	mu sync.Mutex // guards cache and held
	// held holds a single writer's turn leases that are not released, by
	// conversation: they live in memory only (see AcquireLease), and out
	// of the cache's reach, which may drop a conversation a long turn
	// holds.
	held map[string]leaseDoc
	// cache holds, per recent conversation, the window this process last
	// wrote, so the lease holder's next Append need not read it back (an
	// entry is used only if the new messages directly follow it, which no
	// other writer's messages can: sequence numbers only grow); and, for a
	// single writer, the conversation and its newest lease, so a turn reads
	// nothing it wrote itself.
	cache *convCache
	// touches holds a single writer's conversation update times not yet
	// written (see touchEvery).
	touches *touches
}

// New returns a Store on db after ensuring its indexes.
func New(ctx context.Context, db *mongo.Database, opts ...Options) (*Store, error) {
	s := &Store{
		convs: db.Collection(ConversationsCollection), msgs: db.Collection(MessagesCollection),
		leases: db.Collection(LeasesCollection), windows: db.Collection(WindowsCollection), deletions: db.Collection(DeletionsCollection),
		recent: DefaultRecentSize, cache: newConvCache(cacheSize), held: map[string]leaseDoc{},
		single: mongox.SingleWriter(db), writer: rand.Text(),
	}
	var log *slog.Logger
	if len(opts) > 0 {
		if opts[0].RecentSize > 0 {
			s.recent = opts[0].RecentSize
		}
		log = opts[0].Logger
	}
	s.touches = newTouches(s.writeTouch, log)
	if err := mongox.EnsureIndexes(ctx, s.convs,
		mongox.Index{Name: "scope_created", Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "create_time", Value: -1}, {Key: "_id", Value: -1}}},
		mongox.Index{Name: "scope_caller_created", Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "caller", Value: 1}, {Key: "create_time", Value: -1}, {Key: "_id", Value: -1}}},
	); err != nil {
		return nil, err
	}
	if err := mongox.EnsureIndexes(ctx, s.msgs,
		mongox.Index{Name: "conversation_seq", Keys: bson.D{{Key: "conversation_id", Value: 1}, {Key: "seq", Value: 1}}},
	); err != nil {
		return nil, err
	}
	if err := mongox.EnsureIndexes(ctx, s.leases,
		mongox.Index{Name: "conversation", Keys: bson.D{{Key: "conversation_id", Value: 1}}},
	); err != nil {
		return nil, err
	}
	if err := mongox.EnsureIndexes(ctx, s.deletions,
		mongox.Index{Name: "created", Keys: bson.D{{Key: "create_time", Value: 1}}},
	); err != nil {
		return nil, err
	}
	return s, nil
}

// messageID and leaseDocID are the _ids that make sequence numbers and
// lease generations unique per conversation.
func messageID(conv string, seq int64) string  { return fmt.Sprintf("%s/%012d", conv, seq) }
func leaseDocID(conv string, gen int64) string { return fmt.Sprintf("%s/lease/%012d", conv, gen) }

// convDoc is the stored shape of a conversation.
type convDoc struct {
	ID         string    `bson:"_id"`
	TenantID   string    `bson:"tenant_id"`
	ProjectID  string    `bson:"project_id"`
	Caller     string    `bson:"caller"`
	Title      string    `bson:"title"`
	Strategy   string    `bson:"strategy"`
	CreateTime time.Time `bson:"create_time"`
	UpdateTime time.Time `bson:"update_time"`
	// LeaseGen is the generation of the newest lease, as a hint: readers
	// probe the following generations in case it lags.
	LeaseGen int64 `bson:"lease_gen"`
}

func (d *convDoc) conversation() *conversation.Conversation {
	return &conversation.Conversation{
		ID:         d.ID,
		Scope:      conversation.Scope{TenantID: d.TenantID, ProjectID: d.ProjectID},
		Caller:     d.Caller,
		Title:      d.Title,
		Strategy:   d.Strategy,
		CreateTime: d.CreateTime.UTC(),
		UpdateTime: d.UpdateTime.UTC(),
	}
}

// msgDoc is the stored shape of a message.
type msgDoc struct {
	ID             string        `bson:"_id"`
	ConversationID string        `bson:"conversation_id"`
	TenantID       string        `bson:"tenant_id"`
	ProjectID      string        `bson:"project_id"`
	MessageID      string        `bson:"message_id"`
	Seq            int64         `bson:"seq"`
	Role           string        `bson:"role"`
	Content        string        `bson:"content"`
	Reasoning      string        `bson:"reasoning,omitempty"`
	ToolCalls      []toolCallDoc `bson:"tool_calls,omitempty"`
	ToolCallID     string        `bson:"tool_call_id,omitempty"`
	ToolName       string        `bson:"tool_name,omitempty"`
	ToolError      bool          `bson:"tool_error,omitempty"`
	Cancelled      bool          `bson:"cancelled,omitempty"`
	CreateTime     time.Time     `bson:"create_time"`
}

type toolCallDoc struct {
	ID        string `bson:"id"`
	Name      string `bson:"name"`
	Arguments string `bson:"arguments"`
}

func newMsgDoc(scope conversation.Scope, conv string, m conversation.Message) msgDoc {
	d := msgDoc{
		ID: messageID(conv, m.Seq), ConversationID: conv, TenantID: scope.TenantID, ProjectID: scope.ProjectID,
		MessageID: m.ID, Seq: m.Seq, Role: string(m.Role), Content: m.Content, Reasoning: m.Reasoning,
		ToolCallID: m.ToolCallID, ToolName: m.ToolName, ToolError: m.ToolError, Cancelled: m.Cancelled,
		CreateTime: conversation.Millis(m.CreateTime),
	}
	for _, tc := range m.ToolCalls {
		d.ToolCalls = append(d.ToolCalls, toolCallDoc{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	return d
}

func (d *msgDoc) message() conversation.Message {
	m := conversation.Message{
		ID: d.MessageID, Seq: d.Seq, Role: conversation.Role(d.Role), Content: d.Content, Reasoning: d.Reasoning,
		ToolCallID: d.ToolCallID, ToolName: d.ToolName, ToolError: d.ToolError, Cancelled: d.Cancelled,
		CreateTime: d.CreateTime.UTC(),
	}
	for _, tc := range d.ToolCalls {
		m.ToolCalls = append(m.ToolCalls, conversation.ToolCall{ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	return m
}

func notFound(id string) error { return fmt.Errorf("%w: %s", conversation.ErrNotFound, id) }

func byID(id string) bson.D { return bson.D{{Key: "_id", Value: id}} }

// findByID decodes the document with _id id into v; found is false when
// there is none.
func findByID(ctx context.Context, coll *mongo.Collection, id string, v any) (found bool, err error) {
	err = mongox.Translate(coll.FindOne(ctx, byID(id)).Decode(v))
	if errors.Is(err, mongox.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mongostore: read %s %s: %w", coll.Name(), id, err)
	}
	return true, nil
}

// getDoc returns the conversation document, checking the scope in Go (an
// _id-only filter is the one FerretDB answers without a scan).
func (s *Store) getDoc(ctx context.Context, scope conversation.Scope, id string) (*convDoc, error) {
	d := s.cachedConv(id)
	if d == nil {
		d = &convDoc{}
		found, err := findByID(ctx, s.convs, id, d)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, notFound(id)
		}
		s.touches.apply(d)
		s.remember(id, func(c *cached) { c.conv = d })
	}
	if d.TenantID != scope.TenantID || d.ProjectID != scope.ProjectID {
		return nil, notFound(id)
	}
	return d, nil
}

// cachedConv returns a single writer's copy of the conversation document,
// or nil.
func (s *Store) cachedConv(id string) *convDoc {
	if !s.single {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache.get(id).conv
}

// remember records in the cache what a single writer knows of a
// conversation; with many writers it does nothing.
func (s *Store) remember(id string, fn func(*cached)) {
	if !s.single {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.update(id, fn)
}

// forget drops all the store knows of a conversation.
func (s *Store) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.remove(id)
}

// Create implements conversation.Store.
func (s *Store) Create(ctx context.Context, c *conversation.Conversation) error {
	_, err := s.convs.InsertOne(ctx, convDoc{
		ID: c.ID, TenantID: c.Scope.TenantID, ProjectID: c.Scope.ProjectID,
		Caller: c.Caller, Title: c.Title, Strategy: c.Strategy,
		CreateTime: conversation.Millis(c.CreateTime), UpdateTime: conversation.Millis(c.UpdateTime),
	})
	if err = mongox.Translate(err); errors.Is(err, mongox.ErrDuplicate) {
		return fmt.Errorf("%w: %s", conversation.ErrAlreadyExists, c.ID)
	}
	if err != nil {
		return fmt.Errorf("mongostore: create %s: %w", c.ID, err)
	}
	s.forget(c.ID) // a new conversation under an id this process saw deleted
	return nil
}

// Get implements conversation.Store.
func (s *Store) Get(ctx context.Context, scope conversation.Scope, id string) (*conversation.Conversation, error) {
	defer s.lockLease(id)()
	d, err := s.getDoc(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	latest, err := s.latestLease(ctx, id, d.LeaseGen)
	if err != nil {
		return nil, err
	}
	c := d.conversation()
	c.Lease = s.liveLease(latest)
	return c, nil
}

// newestFirst is the conversations' listing order.
var newestFirst = mongox.Keyset{Field: "create_time", Descending: true}

// List implements conversation.Store.
func (s *Store) List(ctx context.Context, scope conversation.Scope, q conversation.ListQuery) ([]*conversation.Conversation, string, error) {
	filterKey := conversation.Filter(scope, q)
	cur, err := conversation.DecodeCursor(q.PageToken, filterKey)
	if err != nil {
		return nil, "", err
	}
	size := conversation.PageSize(q.PageSize)
	filter := bson.D{{Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}}
	if q.Caller != "" {
		filter = append(filter, bson.E{Key: "caller", Value: q.Caller})
	}
	if created := mongox.TimeRange(q.CreatedFrom, q.CreatedTo); len(created) > 0 {
		filter = append(filter, bson.E{Key: "create_time", Value: created})
	}
	if cur != nil {
		filter = append(filter, newestFirst.After(cur.CreateTime, cur.ID))
	}
	opts := options.Find().SetSort(newestFirst.Sort()).SetLimit(int64(size) + 1)
	var docs []convDoc
	if err := mongox.FindAll(ctx, s.convs, filter, &docs, opts); err != nil {
		return nil, "", fmt.Errorf("mongostore: list: %w", mongox.Translate(err))
	}
	out := make([]*conversation.Conversation, 0, min(len(docs), size))
	for i := range docs {
		if i == size {
			break
		}
		s.touches.apply(&docs[i])
		out = append(out, docs[i].conversation())
	}
	if len(docs) <= size {
		return out, "", nil
	}
	last := out[len(out)-1]
	return out, conversation.EncodeCursor(conversation.Cursor{CreateTime: last.CreateTime, ID: last.ID, Filter: filterKey}), nil
}

// deleteLeaseTTL is how long a deletion holds the conversation's lease:
// long enough for its writes, short enough that a crash mid-delete does
// not lock the conversation away for long.
const deleteLeaseTTL = time.Minute

// Delete implements conversation.Store. It takes the conversation's next
// lease generation (a unique insert, like a turn), so no turn can start,
// on any replica, while it deletes, and one that holds the lease makes it
// ErrBusy. Then it records the deletion (conversation_deletions), the
// conversation document goes, and its window, messages and leases follow.
// The record stays until Forgotten: the conversation's turn events, which
// another store holds, go after this returns (conversation.DeletionLog),
// and FinishDeletions finishes a delete a crash or a failure cut.
func (s *Store) Delete(ctx context.Context, scope conversation.Scope, id string, now time.Time) error {
	defer s.lockLease(id)()
	d, err := s.getDoc(ctx, scope, id)
	if err != nil {
		return err
	}
	latest, err := s.latestLease(ctx, id, d.LeaseGen)
	if err != nil {
		return err
	}
	if l := s.liveLease(latest); l.Held(now) {
		return &conversation.BusyError{Holder: l.Holder, Until: l.Until}
	}
	gen := d.LeaseGen + 1
	if latest != nil {
		gen = latest.Gen + 1
	}
	ld := leaseDoc{ID: leaseDocID(id, gen), ConversationID: id, Gen: gen, LeaseID: "delete/" + id, Holder: "delete",
		Writer: s.writer, Until: conversation.Millis(now.Add(deleteLeaseTTL))}
	if _, err := s.leases.InsertOne(ctx, ld); err != nil {
		if err = mongox.Translate(err); errors.Is(err, mongox.ErrDuplicate) {
			return &conversation.BusyError{Holder: "another turn", Until: now.Add(deleteLeaseTTL)}
		}
		return fmt.Errorf("mongostore: delete %s: %w", id, err)
	}
	rec := deletionDoc{ID: id, TenantID: scope.TenantID, ProjectID: scope.ProjectID, LeaseGen: gen, CreateTime: conversation.Millis(now)}
	if s.single {
		// The messages are found by _id from their last sequence number,
		// recorded before any goes (a cut delete leaves gaps to probe past).
		var w windowDoc
		if _, err := findByID(ctx, s.windows, id, &w); err != nil {
			return err
		}
		if rec.LastSeq, err = s.lastMessageSeq(ctx, id, w.LastSeq); err != nil {
			return err
		}
	}
	if _, err := s.deletions.ReplaceOne(ctx, byID(id), rec, options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("mongostore: record the deletion of %s: %w", id, mongox.Translate(err))
	}
	res, err := s.convs.DeleteOne(ctx, byID(id))
	if err != nil {
		return fmt.Errorf("mongostore: delete %s: %w", id, mongox.Translate(err))
	}
	if res.DeletedCount == 0 {
		return notFound(id)
	}
	s.forget(id)
	s.touches.drop(id)
	return s.deleteRest(ctx, rec)
}

// deleteRest deletes what a deleted conversation leaves besides its
// document: its messages and leases, then its window. Deleting what is
// gone already is no error, so it finishes a delete cut at any point; the
// window goes last because a single writer finds the messages from it
// (their last sequence number).
func (s *Store) deleteRest(ctx context.Context, rec deletionDoc) error {
	id := rec.ID
	var w windowDoc
	if _, err := findByID(ctx, s.windows, id, &w); err != nil {
		return err
	}
	if err := s.deleteMessagesAndLeases(ctx, rec, max(w.LastSeq, rec.LastSeq)); err != nil {
		return err
	}
	if _, err := s.windows.DeleteOne(ctx, byID(id)); err != nil {
		return fmt.Errorf("mongostore: delete window of %s: %w", id, mongox.Translate(err))
	}
	return nil
}

// deleteMessagesAndLeases deletes the messages and leases of deletion
// rec's conversation; lastSeq is at most its last message's sequence (a
// single writer probes past it, and deletes every sequence up to the last
// by _id, gaps included).
func (s *Store) deleteMessagesAndLeases(ctx context.Context, rec deletionDoc, lastSeq int64) error {
	id := rec.ID
	if !s.single {
		for _, coll := range []*mongo.Collection{s.msgs, s.leases} {
			if _, err := coll.DeleteMany(ctx, bson.D{{Key: "conversation_id", Value: id}}); err != nil {
				return fmt.Errorf("mongostore: delete %s of %s: %w", coll.Name(), id, mongox.Translate(err))
			}
		}
		return nil
	}
	// A single writer deletes by _id: a query by conversation would parse
	// every message of every conversation on FerretDB.
	last, err := s.lastMessageSeq(ctx, id, lastSeq)
	if err != nil {
		return err
	}
	ids := make([]string, 0, last+3)
	for seq := int64(1); seq <= last; seq++ {
		ids = append(ids, messageID(id, seq))
	}
	for g := max(1, rec.LeaseGen-2); g <= rec.LeaseGen; g++ { // releases delete older generations
		ids = append(ids, leaseDocID(id, g))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, docID := range ids {
		coll := s.msgs
		if int64(i) >= last {
			coll = s.leases
		}
		g.Go(func() error {
			if _, err := coll.DeleteOne(gctx, byID(docID)); err != nil {
				return fmt.Errorf("mongostore: delete %s: %w", docID, mongox.Translate(err))
			}
			return nil
		})
	}
	return g.Wait()
}

// deletionDoc records a conversation's delete until what it leaves
// elsewhere is gone too (conversation.DeletionLog).
type deletionDoc struct {
	ID        string `bson:"_id"` // the conversation's
	TenantID  string `bson:"tenant_id"`
	ProjectID string `bson:"project_id"`
	// LeaseGen is the delete's lease generation: the leases to delete.
	LeaseGen int64 `bson:"lease_gen"`
	// LastSeq is, for a single writer, the sequence number of the last
	// message (the messages to delete by _id).
	LastSeq    int64     `bson:"last_seq,omitempty"`
	CreateTime time.Time `bson:"create_time"`
}

// Forgotten implements conversation.DeletionLog.
func (s *Store) Forgotten(ctx context.Context, id string) error {
	if _, err := s.deletions.DeleteOne(ctx, byID(id)); err != nil {
		return fmt.Errorf("mongostore: drop the deletion record of %s: %w", id, mongox.Translate(err))
	}
	return nil
}

// FinishDeletions implements conversation.DeletionLog. A record younger
// than a delete's lease may be a delete under way, and is left to it. A
// record whose conversation is still there is a delete that failed before
// the conversation went (its caller was told): it is dropped.
func (s *Store) FinishDeletions(ctx context.Context, now time.Time, forget func(context.Context, conversation.Deletion) error) (int, error) {
	var recs []deletionDoc
	filter := bson.D{{Key: "create_time", Value: bson.D{{Key: "$lt", Value: now.Add(-deleteLeaseTTL)}}}}
	if err := mongox.FindAll(ctx, s.deletions, filter, &recs, options.Find().SetSort(bson.D{{Key: "create_time", Value: 1}}).SetLimit(100)); err != nil {
		return 0, fmt.Errorf("mongostore: list deletions: %w", mongox.Translate(err))
	}
	var errs []error
	finished := 0
	for _, rec := range recs {
		var d convDoc
		found, err := findByID(ctx, s.convs, rec.ID, &d)
		if err == nil && !found {
			if err = s.deleteRest(ctx, rec); err == nil {
				err = forget(ctx, conversation.Deletion{Scope: conversation.Scope{TenantID: rec.TenantID, ProjectID: rec.ProjectID}, ID: rec.ID})
			}
		}
		if err == nil {
			// This record only: a delete retried meanwhile wrote a new one.
			_, err = mongox.DeleteIf(ctx, s.deletions, rec.ID, bson.D{{Key: "create_time", Value: rec.CreateTime}})
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("conversation %s: %w", rec.ID, err))
			continue
		}
		if !found {
			finished++
		}
	}
	return finished, errors.Join(errs...)
}

// windowDoc caches a conversation's newest messages. With many writers
// Append writes it after the messages themselves and before returning, and
// a turn releases its lease only after its appends returned; so the window
// can lag the messages only after a holder died mid-turn. AcquireLease
// marks the window Suspect when it takes over a lease that was never
// released, and a suspect window is bypassed until the next Append
// rebuilds it.
//
// A single writer keeps its windows in memory and writes the document only
// once the window has moved windowEvery messages past the stored one: on
// FerretDB an update parses and rewrites the whole document, and rewriting
// a window of 32 messages at every append took most of a chat turn's
// database time (the growth bench at 20 turns a conversation: 99 turns/s
// with it, 269 without). A window it reads back from the database is then
// only a start: the messages after it are read by _id (catchUp).
type windowDoc struct {
	ID      string   `bson:"_id"`
	LastSeq int64    `bson:"last_seq"`
	Recent  []msgDoc `bson:"recent"`
	Suspect bool     `bson:"suspect"`
}

// windowEvery is how many messages a single writer's window may move past
// the stored window document before the document is written again.
const windowEvery = 16

// storedWindow reads the window document of id (a zero window if there is
// none). For a single writer it is then brought up to the conversation's
// last message (loadWindow) and remembered with the stored document's
// last_seq, unless suspect.
func (s *Store) storedWindow(ctx context.Context, id string) (windowDoc, error) {
	if !s.single {
		var w windowDoc
		_, err := findByID(ctx, s.windows, id, &w)
		return w, err
	}
	// Under the window's lock, as an append moves it: what is cached then
	// is never older than the stored window and its messages.
	defer mongox.LockDocument(s.windows, id)()
	if cw := s.cachedWindow(id); cw != nil {
		return *cw, nil
	}
	w, stored, err := s.loadWindow(ctx, id)
	if err != nil || w.Suspect {
		return w, err
	}
	s.mu.Lock()
	s.cache.update(id, func(c *cached) { c.window, c.stored = &w, stored })
	s.mu.Unlock()
	return w, nil
}

// loadWindow is a single writer's read of the window document of id (a
// zero window if there is none): unless suspect, it is brought up to the
// conversation's last message (catchUp); stored is the document's own
// last_seq. The caller holds the window's lock.
func (s *Store) loadWindow(ctx context.Context, id string) (w windowDoc, stored int64, err error) {
	if _, err := findByID(ctx, s.windows, id, &w); err != nil {
		return w, 0, err
	}
	if stored = w.LastSeq; w.Suspect {
		return w, stored, nil
	}
	w, err = s.catchUp(ctx, id, w)
	return w, stored, err
}

// catchUp adds to w the messages stored after it, read by _id from
// w.LastSeq+1 until one is missing, keeping the newest s.recent.
func (s *Store) catchUp(ctx context.Context, id string, w windowDoc) (windowDoc, error) {
	w.ID = id
	w.Recent = slices.Clip(w.Recent)
	for {
		var d msgDoc
		found, err := findByID(ctx, s.msgs, messageID(id, w.LastSeq+1), &d)
		if err != nil {
			return w, err
		}
		if !found {
			break
		}
		w.Recent = append(w.Recent, d)
		w.LastSeq++
	}
	if len(w.Recent) > s.recent {
		w.Recent = w.Recent[len(w.Recent)-s.recent:]
	}
	return w, nil
}

// Messages implements conversation.Store. A window the cache covers costs
// two _id reads (the conversation and its window); anything else queries
// the messages collection.
func (s *Store) Messages(ctx context.Context, scope conversation.Scope, id string, last int) ([]conversation.Message, error) {
	if _, err := s.getDoc(ctx, scope, id); err != nil {
		return nil, err
	}
	var w windowDoc
	if cw := s.cachedWindow(id); cw != nil {
		w = *cw
	} else {
		var err error
		if w, err = s.storedWindow(ctx, id); err != nil {
			return nil, err
		}
	}
	covered := int64(len(w.Recent)) == w.LastSeq || (last > 0 && last <= len(w.Recent))
	if !w.Suspect && covered {
		recent := w.Recent
		if last > 0 && len(recent) > last {
			recent = recent[len(recent)-last:]
		}
		out := make([]conversation.Message, len(recent))
		for i := range recent {
			out[i] = recent[i].message()
		}
		return out, nil
	}
	return s.readMessages(ctx, id, w.LastSeq, last)
}

// readMessages reads the last `last` messages (all for last <= 0), oldest
// first. With many writers it queries the messages collection (indexed on
// MongoDB). A single writer reads them by _id instead, from the sequence
// number hint (the window's, which lags only after a holder died) probing
// forward for later ones: on FerretDB a query by conversation would parse
// every message of every conversation.
func (s *Store) readMessages(ctx context.Context, id string, hint int64, last int) ([]conversation.Message, error) {
	if s.single {
		return s.messagesByID(ctx, id, hint, last)
	}
	opts := options.Find().SetSort(bson.D{{Key: "seq", Value: 1}})
	if last > 0 {
		opts = options.Find().SetSort(bson.D{{Key: "seq", Value: -1}}).SetLimit(int64(last))
	}
	var docs []msgDoc
	if err := mongox.FindAll(ctx, s.msgs, bson.D{{Key: "conversation_id", Value: id}}, &docs, opts); err != nil {
		return nil, fmt.Errorf("mongostore: messages of %s: %w", id, mongox.Translate(err))
	}
	out := make([]conversation.Message, len(docs))
	for i, d := range docs {
		j := i
		if last > 0 {
			j = len(docs) - 1 - i // newest first on the wire, oldest first out
		}
		out[j] = d.message()
	}
	return out, nil
}

// cachedWindow returns a single writer's copy of the window it last
// wrote, or nil: with many writers another replica may have written since.
func (s *Store) cachedWindow(id string) *windowDoc {
	if !s.single {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cache.get(id).window
}

// lastMessageSeq returns the sequence number of conversation id's last
// message, probing _ids forward from hint, a sequence at most the last
// (messages take their sequence numbers in order; a gap ends the probe).
func (s *Store) lastMessageSeq(ctx context.Context, id string, hint int64) (int64, error) {
	last := max(hint, 0)
	for {
		var d msgDoc
		found, err := findByID(ctx, s.msgs, messageID(id, last+1), &d)
		if err != nil || !found {
			return last, err
		}
		last++
	}
}

// messagesByID is readMessages for a single writer: the last sequence
// number is found by probing _ids forward from hint, then the messages are
// read by _id, a few at a time.
func (s *Store) messagesByID(ctx context.Context, id string, hint int64, last int) ([]conversation.Message, error) {
	lastSeq, err := s.lastMessageSeq(ctx, id, hint)
	if err != nil {
		return nil, err
	}
	from := int64(1)
	if last > 0 {
		from = max(1, lastSeq-int64(last)+1)
	}
	if lastSeq < from {
		return nil, nil
	}
	docs := make([]msgDoc, lastSeq-from+1)
	found := make([]bool, len(docs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range docs {
		g.Go(func() (err error) {
			found[i], err = findByID(gctx, s.msgs, messageID(id, from+int64(i)), &docs[i])
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make([]conversation.Message, 0, len(docs))
	for i := range docs {
		if found[i] { // a gap is a message a crash cut out of an insert
			out = append(out, docs[i].message())
		}
	}
	return out, nil
}

// Append implements conversation.Store: one ordered insert of the
// messages, whose _ids carry their sequence numbers, then an update of the
// conversation's cache of recent messages.
func (s *Store) Append(ctx context.Context, scope conversation.Scope, id string, msgs ...conversation.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	docs := make([]msgDoc, len(msgs))
	anyDocs := make([]any, len(msgs))
	for i, m := range msgs {
		docs[i] = newMsgDoc(scope, id, m)
		anyDocs[i] = docs[i]
	}
	_, err := s.msgs.InsertMany(ctx, anyDocs, options.InsertMany().SetOrdered(true))
	if err = mongox.Translate(err); errors.Is(err, mongox.ErrDuplicate) {
		return fmt.Errorf("%w: a message sequence number of %s is taken: %w", conversation.ErrLeaseLost, id, err)
	}
	if err != nil {
		return fmt.Errorf("mongostore: append to %s: %w", id, err)
	}
	return s.cacheRecent(ctx, id, docs)
}

// cacheRecent adds docs to the conversation's window. A suspect window,
// or one the docs do not follow, is rebuilt from the messages. The window
// only moves forward: a holder whose lease was taken over, writing late,
// cannot put back an older window over its successor's (with many writers
// the update matches only a window behind docs, atomically on MongoDB; a
// single writer knows the last window it wrote).
func (s *Store) cacheRecent(ctx context.Context, id string, docs []msgDoc) error {
	if s.single {
		return s.cacheRecentSingle(ctx, id, docs)
	}
	newLast := docs[len(docs)-1].Seq
	defer mongox.LockDocument(s.windows, id)()
	s.mu.Lock()
	cw := s.cache.get(id).window
	s.mu.Unlock()
	var w windowDoc
	ok := cw != nil
	if ok {
		w = *cw
	}
	if !ok || w.LastSeq+1 != docs[0].Seq {
		w = windowDoc{}
		if _, err := findByID(ctx, s.windows, id, &w); err != nil {
			return err
		}
	}
	recent := append(slices.Clip(w.Recent), docs...)
	if w.Suspect || docs[0].Seq != w.LastSeq+1 {
		var err error
		if recent, err = s.rebuildWindow(ctx, id, docs[0], newLast); err != nil {
			return err
		}
	}
	if len(recent) > s.recent {
		recent = recent[len(recent)-s.recent:]
	}
	windowLast := recent[len(recent)-1].Seq // beyond newLast if a rebuild found later messages
	filter := append(byID(id), bson.E{Key: "last_seq", Value: bson.D{{Key: "$lt", Value: windowLast}}})
	err := s.writeWindow(ctx, filter, recent, windowLast)
	if errors.Is(err, mongox.ErrDuplicate) {
		// The window is at newLast or beyond: a successor's. Leave it.
		s.setWindow(id, nil)
		return nil
	}
	if err != nil {
		s.setWindow(id, nil)
		return fmt.Errorf("mongostore: cache messages of %s: %w", id, err)
	}
	s.setWindow(id, &windowDoc{ID: id, LastSeq: windowLast, Recent: recent})
	return nil
}

// rebuildWindow reads the newest s.recent messages of id (at or after
// newLast), as window entries; first is one of the messages appended, for
// the scope.
func (s *Store) rebuildWindow(ctx context.Context, id string, first msgDoc, newLast int64) ([]msgDoc, error) {
	msgs, err := s.readMessages(ctx, id, newLast, s.recent)
	if err != nil {
		return nil, err
	}
	recent := make([]msgDoc, 0, len(msgs))
	for _, m := range msgs {
		recent = append(recent, newMsgDoc(conversation.Scope{TenantID: first.TenantID, ProjectID: first.ProjectID}, id, m))
	}
	return recent, nil
}

// writeWindow stores the window recent, ending at lastSeq, where filter
// matches (an upsert).
func (s *Store) writeWindow(ctx context.Context, filter bson.D, recent []msgDoc, lastSeq int64) error {
	_, err := s.windows.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{
		{Key: "recent", Value: recent},
		{Key: "last_seq", Value: lastSeq},
		{Key: "suspect", Value: false},
	}}}, options.UpdateOne().SetUpsert(true))
	return mongox.Translate(err)
}

// cacheRecentSingle is cacheRecent for a single writer (see windowDoc):
// the window moves in memory, and its document is written once it is
// windowEvery messages ahead of the stored one, or when the stored one was
// suspect. The writer knows the last window it made, so a holder whose
// lease was taken over, appending late, leaves a newer window alone.
func (s *Store) cacheRecentSingle(ctx context.Context, id string, docs []msgDoc) error {
	newLast := docs[len(docs)-1].Seq
	defer mongox.LockDocument(s.windows, id)()
	s.mu.Lock()
	c := s.cache.get(id)
	s.mu.Unlock()
	var w windowDoc
	stored, rewrite := c.stored, false
	switch {
	case c.window != nil && c.window.LastSeq >= newLast:
		return nil // a successor moved the window past docs
	case c.window != nil && c.window.LastSeq+1 == docs[0].Seq:
		w = *c.window
		w.Recent = append(slices.Clip(w.Recent), docs...)
		w.LastSeq = newLast
	default:
		// Unknown here, or docs do not follow it: the stored window, and
		// the messages after it (docs among them: they are stored).
		var err error
		if w, stored, err = s.loadWindow(ctx, id); err != nil {
			return err
		}
		rewrite = w.Suspect
		if w.Suspect || w.LastSeq < newLast { // a gap before docs stops catchUp
			recent, err := s.rebuildWindow(ctx, id, docs[0], newLast)
			if err != nil {
				return err
			}
			if len(recent) == 0 {
				return fmt.Errorf("mongostore: cache messages of %s: its messages up to %d are not stored", id, newLast)
			}
			w = windowDoc{Recent: recent, LastSeq: recent[len(recent)-1].Seq}
			rewrite = true
		}
	}
	w.ID, w.Suspect = id, false
	if len(w.Recent) > s.recent {
		w.Recent = w.Recent[len(w.Recent)-s.recent:]
	}
	if rewrite || w.LastSeq-stored >= windowEvery {
		if err := s.writeWindow(ctx, byID(id), w.Recent, w.LastSeq); err != nil {
			s.setWindow(id, nil)
			return fmt.Errorf("mongostore: cache messages of %s: %w", id, err)
		}
		stored = w.LastSeq
	}
	s.mu.Lock()
	s.cache.update(id, func(c *cached) { c.window, c.stored = &w, stored })
	s.mu.Unlock()
	return nil
}

// setWindow records the window this process last wrote (nil: unknown).
func (s *Store) setWindow(id string, w *windowDoc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cache.update(id, func(c *cached) { c.window = w })
}

// leaseDoc is one generation of a conversation's turn lease.
type leaseDoc struct {
	ID             string `bson:"_id"`
	ConversationID string `bson:"conversation_id"`
	Gen            int64  `bson:"gen"`
	LeaseID        string `bson:"lease_id"`
	Holder         string `bson:"holder"`
	// Writer is the store that took the lease (Store.writer); older
	// documents have none.
	Writer   string    `bson:"writer,omitempty"`
	Until    time.Time `bson:"until"`
	Released bool      `bson:"released"`
}

func (d *leaseDoc) lease() conversation.Lease {
	if d == nil || d.Released {
		return conversation.Lease{}
	}
	return conversation.Lease{ID: d.LeaseID, Holder: d.Holder, Until: d.Until.UTC(), Gen: d.Gen}
}

// liveLease is d's lease as other turns must respect it: none when d is
// released, or, for a single writer, when another writer took it (the
// process this one replaced, whose turn died with it).
func (s *Store) liveLease(d *leaseDoc) conversation.Lease {
	if s.single && d != nil && d.Writer != s.writer {
		return conversation.Lease{}
	}
	return d.lease()
}

// latestLease returns the newest lease generation of a conversation (nil
// if it never had one), starting from the hint gen and probing later
// generations by _id in case the hint lags.
func (s *Store) latestLease(ctx context.Context, id string, gen int64) (*leaseDoc, error) {
	if s.single {
		s.mu.Lock()
		h, holding := s.held[id]
		c := s.cache.get(id)
		s.mu.Unlock()
		switch {
		case holding:
			return &h, nil
		case c.leaseKnown:
			return c.lease, nil
		}
	}
	latest, err := s.probeLease(ctx, id, gen)
	if err != nil {
		return nil, err
	}
	s.remember(id, func(c *cached) { c.lease, c.leaseKnown = latest, true })
	return latest, nil
}

// probeLease reads the newest lease generation from the database.
func (s *Store) probeLease(ctx context.Context, id string, gen int64) (*leaseDoc, error) {
	var latest *leaseDoc
	if gen > 0 {
		var d leaseDoc
		found, err := findByID(ctx, s.leases, leaseDocID(id, gen), &d)
		if err != nil {
			return nil, err
		}
		if found {
			latest = &d
		}
	}
	for {
		var next leaseDoc
		found, err := findByID(ctx, s.leases, leaseDocID(id, gen+1), &next)
		if err != nil {
			return nil, err
		}
		if !found {
			return latest, nil
		}
		latest, gen = &next, gen+1
	}
}

// AcquireLease implements conversation.Store. It finds the newest lease
// generation and, if that is released or expired at now, inserts the next
// one. Two replicas that both see generation n free both try to insert
// n+1; the unique _id admits one, and the other gets ErrBusy.
func (s *Store) AcquireLease(ctx context.Context, scope conversation.Scope, id string, lease conversation.Lease, now time.Time) (*conversation.Conversation, error) {
	defer s.lockLease(id)()
	d, err := s.getDoc(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	latest, err := s.latestLease(ctx, id, d.LeaseGen)
	if err != nil {
		return nil, err
	}
	if l := s.liveLease(latest); l.Held(now) {
		return nil, &conversation.BusyError{Holder: l.Holder, Until: l.Until}
	}
	gen := d.LeaseGen + 1
	if latest != nil {
		gen = latest.Gen + 1
	}
	ld := leaseDoc{
		ID: leaseDocID(id, gen), ConversationID: id, Gen: gen,
		LeaseID: lease.ID, Holder: lease.Holder, Writer: s.writer, Until: conversation.Millis(lease.Until),
	}
	if s.single {
		// No other process writes the database, and the process that
		// replaces this one takes its leases as free (liveLease): a turn
		// lease serves this process alone, so it lives in memory; the
		// lock above orders it, and the cache learns it below. (Written,
		// it cost a turn three of its six writes: the lease, its release
		// and the removal of the previous generation.)
		s.mu.Lock()
		s.held[id] = ld
		s.mu.Unlock()
	} else if _, err := s.leases.InsertOne(ctx, ld); err != nil {
		if err = mongox.Translate(err); !errors.Is(err, mongox.ErrDuplicate) {
			return nil, fmt.Errorf("mongostore: acquire lease on %s: %w", id, err)
		}
		var winner leaseDoc
		if _, err := findByID(ctx, s.leases, leaseDocID(id, gen), &winner); err != nil {
			return nil, err
		}
		w := winner.lease()
		return nil, &conversation.BusyError{Holder: w.Holder, Until: w.Until}
	}
	s.remember(id, func(c *cached) { c.lease, c.leaseKnown = &ld, true })
	if latest != nil && !latest.Released {
		s.setWindow(id, nil) // read it back: the dead holder may have written messages after it
		// Its holder died mid-turn: the window may lag its last messages.
		if _, err := s.windows.UpdateOne(ctx, byID(id), bson.D{
			{Key: "$set", Value: bson.D{{Key: "suspect", Value: true}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "last_seq", Value: int64(0)}}},
		}, options.UpdateOne().SetUpsert(true)); err != nil {
			return nil, fmt.Errorf("mongostore: mark window of %s: %w", id, mongox.Translate(err))
		}
	}
	// The lease_gen hint moves on, and the previous generation goes, when
	// this lease is released: readers probe past a lagging hint, and an old
	// generation is inert.
	c := d.conversation()
	c.Lease = ld.lease()
	return c, nil
}

// lockLease serialises, for a single writer, the lease reads and writes of
// one conversation with the cache updates that follow them, so a read of
// the database can never put back an older lease over a newer one this
// process just wrote. With many writers the cache holds no leases and
// nothing is locked.
func (s *Store) lockLease(id string) (unlock func()) {
	if !s.single {
		return func() {}
	}
	return mongox.LockDocument(s.leases, id)
}

// ownLease checks that lease is still the newest generation and not
// released, returning its document. A single writer checks against the
// newest generation it knows, which is the truth.
func (s *Store) ownLease(ctx context.Context, id string, lease conversation.Lease) (*leaseDoc, error) {
	if lease.ID == "" || lease.Gen <= 0 {
		return nil, fmt.Errorf("%w: %s: not a lease AcquireLease returned", conversation.ErrLeaseLost, id)
	}
	if s.single {
		s.mu.Lock()
		h, holding := s.held[id]
		s.mu.Unlock()
		if !holding || h.Gen != lease.Gen || h.LeaseID != lease.ID {
			return nil, fmt.Errorf("%w: %s", conversation.ErrLeaseLost, id)
		}
		return &h, nil
	}
	var d leaseDoc
	found, err := findByID(ctx, s.leases, leaseDocID(id, lease.Gen), &d)
	if err != nil {
		return nil, err
	}
	if !found || d.LeaseID != lease.ID || d.Released {
		return nil, fmt.Errorf("%w: %s", conversation.ErrLeaseLost, id)
	}
	var next leaseDoc
	taken, err := findByID(ctx, s.leases, leaseDocID(id, lease.Gen+1), &next)
	if err != nil {
		return nil, err
	}
	if taken {
		return nil, fmt.Errorf("%w: %s: taken over by %s", conversation.ErrLeaseLost, id, next.Holder)
	}
	return &d, nil
}

// RenewLease implements conversation.Store.
func (s *Store) RenewLease(ctx context.Context, scope conversation.Scope, id string, lease conversation.Lease, until time.Time) error {
	defer s.lockLease(id)()
	own, err := s.ownLease(ctx, id, lease)
	if err != nil {
		return err
	}
	return s.setLease(ctx, own, bson.D{{Key: "until", Value: conversation.Millis(until)}})
}

// ReleaseLease implements conversation.Store.
func (s *Store) ReleaseLease(ctx context.Context, scope conversation.Scope, id string, lease conversation.Lease, now time.Time) error {
	defer s.lockLease(id)()
	own, err := s.ownLease(ctx, id, lease)
	if err != nil {
		return err
	}
	if err := s.setLease(ctx, own, bson.D{{Key: "released", Value: true}}); err != nil {
		return err
	}
	// A single writer holds the touch back, so that a conversation's
	// turns within touchEvery make one write.
	t := touch{updateTime: conversation.Millis(now), leaseGen: own.Gen}
	if s.single {
		if err := s.touches.set(ctx, id, t); err != nil {
			return err
		}
	} else if err := s.writeTouch(ctx, id, t); err != nil {
		return err
	}
	s.remember(id, func(c *cached) {
		if c.conv != nil {
			c.conv.UpdateTime, c.conv.LeaseGen = conversation.Millis(now), own.Gen
		}
	})
	if own.Gen > 1 && !s.single {
		_, _ = s.leases.DeleteOne(ctx, byID(leaseDocID(id, own.Gen-1))) // history; best effort
	}
	return nil
}

// setLease updates the holder's own lease generation document; only the
// holder writes it. A single writer's lease lives in memory (setHeld).
func (s *Store) setLease(ctx context.Context, own *leaseDoc, set bson.D) error {
	if s.single {
		s.setHeld(own, set)
		return nil
	}
	res, err := s.leases.UpdateOne(ctx, byID(own.ID), bson.D{{Key: "$set", Value: set}})
	if err != nil {
		return fmt.Errorf("mongostore: lease on %s: %w", own.ConversationID, mongox.Translate(err))
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("%w: %s", conversation.ErrLeaseLost, own.ConversationID)
	}
	return nil
}

// setHeld applies set to a single writer's lease own, in memory (see
// AcquireLease): a released lease leaves held, and the cache keeps it as
// the conversation's newest generation. The caller holds the lease lock.
func (s *Store) setHeld(own *leaseDoc, set bson.D) {
	l := *own
	for _, e := range set {
		switch e.Key {
		case "until":
			l.Until = e.Value.(time.Time)
		case "released":
			l.Released = e.Value.(bool)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Released {
		delete(s.held, l.ConversationID)
	} else {
		s.held[l.ConversationID] = l
	}
	s.cache.update(l.ConversationID, func(c *cached) { c.lease, c.leaseKnown = &l, true })
}
