// Package labels stores the approved classifications of runs: one document
// per (run, conversation), with _id "run/conversation", so a conversation
// is labelled at most once per run however often a save is repeated (after
// a crash, a retry or a resume).
//
// Every hot-path access is by exact _id: Save inserts (the unique _id
// rejects a repeat), and List reads the labels of the conversations the
// run's checkpoint says it labelled, one lookup by _id each. So a run's end
// costs the same whatever the number of labels of earlier runs: on the
// embedded FerretDB v1 any other filter parses every document of the
// collection, which grows with every run. On MongoDB these lookups use the
// _id index. The secondary index scope_run_conversation serves no query of
// the service; it stays for queries by run made outside it (an export, the
// tests' counts).
//
// # Queries and indexes (MongoDB)
//
//	query                           index
//	Save: insert (unique _id)       _id_
//	List: {_id} one per label       _id_
//
// TestEveryQueryIsIndexed checks the shapes the store sends against the
// indexes; it assumes only MongoDB's unique _id index.
package labels

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Collection is the MongoDB collection of labels.
const Collection = "classifier_labels"

// Label is one stored classification.
type Label struct {
	// RunID is the run that labelled the conversation.
	RunID string
	// ConversationID is the conversation.
	ConversationID string
	// Label is RESOLVED or UNRESOLVED.
	Label statemachine.Label
	// Reason is the model's justification.
	Reason string
	// SavedAt is when the label was first stored.
	SavedAt time.Time
}

// Store keeps labels. It is safe for concurrent use.
type Store struct {
	coll *mongo.Collection
	now  func() time.Time
}

// NewStore returns a store on db's labels collection.
func NewStore(db *mongo.Database) *Store {
	return &Store{coll: db.Collection(Collection), now: time.Now}
}

// EnsureIndexes creates the store's indexes; call it at start. The unique
// key is the document id (run id + conversation id); the secondary index
// serves queries by run or conversation made outside the service (see the
// package doc).
func (s *Store) EnsureIndexes(ctx context.Context) error {
	return mongox.EnsureIndexes(ctx, s.coll,
		mongox.Index{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "run_id", Value: 1}, {Key: "conversation_id", Value: 1}}, Unique: true, Name: "scope_run_conversation"},
	)
}

type doc struct {
	ID             string    `bson:"_id"`
	TenantID       string    `bson:"tenant_id"`
	ProjectID      string    `bson:"project_id"`
	RunID          string    `bson:"run_id"`
	ConversationID string    `bson:"conversation_id"`
	Label          string    `bson:"label"`
	Reason         string    `bson:"reason"`
	SavedAt        time.Time `bson:"saved_at"`
}

// docID is the label's unique id: a conversation is labelled once per run.
func docID(runID, conversationID string) string { return runID + "/" + conversationID }

// Save stores the classifications of run runID. A label already stored for
// the same run and conversation is kept as it is: the document id is unique,
// so saving the same batch again changes nothing. It returns how many labels
// were new.
//
// Labels are inserted, never updated: on the embedded store (FerretDB v1) an
// update scans the whole collection, an insert does not.
func (s *Store) Save(ctx context.Context, scope *commonv1.Scope, runID string, cls []statemachine.Classification) (int, error) {
	if len(cls) == 0 {
		return 0, nil
	}
	now := s.now().UTC()
	docs := make([]any, 0, len(cls))
	for _, c := range cls {
		docs = append(docs, doc{
			ID: docID(runID, c.ConversationID), TenantID: scope.GetTenantId(), ProjectID: scope.GetProjectId(),
			RunID: runID, ConversationID: c.ConversationID, Label: string(c.Label), Reason: c.Reason, SavedAt: now,
		})
	}
	res, err := s.coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	inserted := 0
	if res != nil {
		inserted = len(res.InsertedIDs)
	}
	if err != nil && !onlyDuplicates(err) {
		return inserted, fmt.Errorf("labels: save run %s: %w", runID, mongox.Translate(err))
	}
	return inserted, nil
}

// onlyDuplicates reports whether every write error of a bulk insert is a
// duplicate key (a label saved before).
func onlyDuplicates(err error) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if !mongo.IsDuplicateKeyError(we) {
			return false
		}
	}
	return true
}

// List returns the labels run runID stored in the scope for the given
// conversations (the run's checkpoint records which it labelled), by
// conversation id. It reads each label by its _id, so its cost follows the
// run, never the collection; a conversation without a label of the run is
// left out.
func (s *Store) List(ctx context.Context, scope *commonv1.Scope, runID string, conversationIDs []string) ([]Label, error) {
	ids := slices.Clone(conversationIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	within := bson.D{{Key: "tenant_id", Value: scope.GetTenantId()}, {Key: "project_id", Value: scope.GetProjectId()}, {Key: "run_id", Value: runID}}
	out := make([]Label, 0, len(ids))
	for _, id := range ids {
		var d doc
		err := mongox.FindByID(ctx, s.coll, docID(runID, id), within, &d)
		if errors.Is(err, mongox.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("labels: list run %s: %w", runID, err)
		}
		out = append(out, Label{RunID: d.RunID, ConversationID: d.ConversationID, Label: statemachine.Label(d.Label), Reason: d.Reason, SavedAt: d.SavedAt})
	}
	return out, nil
}
