package conversations

import (
	"context"
	"errors"
	"fmt"
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

// Store keeps conversations in MongoDB, one document per conversation,
// unique by (tenant, project, id). Every method filters by scope. A Store is
// safe for concurrent use.
type Store struct {
	coll *mongo.Collection
	now  func() time.Time
}

// NewStore returns a store on db's conversations collection.
func NewStore(db *mongo.Database) *Store {
	return &Store{coll: db.Collection(Collection), now: time.Now}
}

// EnsureIndexes creates the store's indexes; call it at start.
func (s *Store) EnsureIndexes(ctx context.Context) error {
	return mongox.EnsureIndexes(ctx, s.coll,
		mongox.Index{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "id", Value: 1}}, Unique: true, Name: "scope_id"},
	)
}

// doc is the stored form. Derived fields (message_count, started_at,
// ended_at) exist so plans can query them.
type doc struct {
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
	now := s.now()
	stored := 0
	for start := 0; start < len(convs); start += importChunk {
		end := min(start+importChunk, len(convs))
		models := make([]mongo.WriteModel, 0, end-start)
		for _, c := range convs[start:end] {
			f := append(scopeFilter(scope), bson.E{Key: "id", Value: c.ID})
			models = append(models, mongo.NewReplaceOneModel().SetFilter(f).SetReplacement(toDoc(scope, c, now)).SetUpsert(true))
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
// repeatable: a resumed run fetches the same conversations).
func (s *Store) Find(ctx context.Context, scope *commonv1.Scope, filter bson.D, exclude []string, limit int) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
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
	cur, err := s.coll.Find(ctx, bson.D{{Key: "$and", Value: clauses}}, opts)
	if err != nil {
		return nil, fmt.Errorf("conversations: find: %w", mongox.Translate(err))
	}
	var rows []struct {
		ID string `bson:"id"`
	}
	if err := cur.All(ctx, &rows); err != nil {
		return nil, fmt.Errorf("conversations: find: %w", mongox.Translate(err))
	}
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	return ids, nil
}

// Get returns the conversations with the given ids, in the order asked. A
// missing id is ErrNotFound naming it.
func (s *Store) Get(ctx context.Context, scope *commonv1.Scope, ids []string) ([]Conversation, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	f := append(scopeFilter(scope), bson.E{Key: "id", Value: bson.D{{Key: "$in", Value: ids}}})
	cur, err := s.coll.Find(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("conversations: get: %w", mongox.Translate(err))
	}
	var docs []doc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("conversations: get: %w", mongox.Translate(err))
	}
	byID := make(map[string]doc, len(docs))
	for _, d := range docs {
		byID[d.ID] = d
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
