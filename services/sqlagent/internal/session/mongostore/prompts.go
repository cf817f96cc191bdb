package mongostore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// PromptsCollection holds the logged prompts (prompt logging), one
// document per model call, listed by session in time order.
const PromptsCollection = "sql_prompts"

var promptIndexes = []mongox.Index{
	{Keys: bson.D{{Key: "tenant_id", Value: 1}, {Key: "project_id", Value: 1}, {Key: "session_id", Value: 1}, {Key: "time", Value: 1}, {Key: "_id", Value: 1}}, Name: "scope_session_time"},
}

type promptMessageDoc struct {
	Role    string `bson:"role"`
	Content string `bson:"content"`
}

type promptDoc struct {
	ID        bson.ObjectID      `bson:"_id"`
	TenantID  string             `bson:"tenant_id"`
	ProjectID string             `bson:"project_id"`
	SessionID string             `bson:"session_id"`
	Agent     string             `bson:"agent"`
	Messages  []promptMessageDoc `bson:"messages"`
	Answer    string             `bson:"answer"`
	Error     string             `bson:"error"`
	Time      time.Time          `bson:"time"`
}

// AddPrompt inserts p.
func (st *Store) AddPrompt(ctx context.Context, p *session.PromptRecord) error {
	d := promptDoc{
		ID: bson.NewObjectID(), TenantID: p.Scope.TenantID, ProjectID: p.Scope.ProjectID, SessionID: p.SessionID,
		Agent: p.Agent, Answer: p.Answer, Error: p.Error, Time: p.Time.UTC(), Messages: []promptMessageDoc{},
	}
	for _, m := range p.Messages {
		d.Messages = append(d.Messages, promptMessageDoc{Role: m.Role, Content: m.Content})
	}
	if _, err := st.prompts.InsertOne(ctx, d); err != nil {
		return fmt.Errorf("mongostore: add prompt: %w", mongox.Translate(err))
	}
	return nil
}

// promptOrder is the prompts' listing order: oldest first.
var promptOrder = mongox.Keyset{Field: "time"}

// ListPrompts returns the prompts of session sessionID of scope, oldest
// first (by time, then by id), after after when set, at most limit.
func (st *Store) ListPrompts(ctx context.Context, scope session.Scope, sessionID string, after *session.Cursor, limit int) ([]session.PromptRecord, error) {
	filter := bson.D{{Key: "tenant_id", Value: scope.TenantID}, {Key: "project_id", Value: scope.ProjectID}, {Key: "session_id", Value: sessionID}}
	if after != nil {
		id, err := bson.ObjectIDFromHex(after.ID)
		if err != nil {
			return nil, session.ErrBadCursor
		}
		// Times are kept to the millisecond, as BSON dates are.
		at := after.Time.UTC().Truncate(time.Millisecond)
		filter = append(filter, promptOrder.After(at, id))
	}
	var docs []promptDoc
	if err := mongox.FindAll(ctx, st.prompts, filter, &docs, options.Find().SetSort(promptOrder.Sort()).SetLimit(int64(limit))); err != nil {
		return nil, fmt.Errorf("mongostore: list prompts: %w", mongox.Translate(err))
	}
	out := make([]session.PromptRecord, 0, len(docs))
	for _, d := range docs {
		p := session.PromptRecord{
			ID: d.ID.Hex(), Scope: session.Scope{TenantID: d.TenantID, ProjectID: d.ProjectID}, SessionID: d.SessionID,
			Prompt: sqlgen.Prompt{Agent: d.Agent, Answer: d.Answer, Error: d.Error, Time: d.Time.UTC()},
		}
		for _, m := range d.Messages {
			p.Messages = append(p.Messages, sqlgen.PromptMessage{Role: m.Role, Content: m.Content})
		}
		out = append(out, p)
	}
	return out, nil
}
