package session

import (
	"context"
	"errors"
	"regexp"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

// Prompt logging (off by default): every prompt and answer of the SQL and
// job agents is kept per session, secrets masked. No result row is ever
// part of a prompt (the model sees the schema, the user's words and the
// SQL), so none can reach the log; what the user typed may carry a
// password or a key, and that is masked before anything is stored.

// PromptRecord is one logged model call of a session.
type PromptRecord struct {
	// ID is the store's, set when read back.
	ID        string
	Scope     Scope
	SessionID string
	sqlgen.Prompt
}

// Cursor is p's place in the oldest-first order.
func (p *PromptRecord) Cursor() Cursor { return Cursor{Time: p.Time, ID: p.ID} }

// PromptStore keeps logged prompts. ListPrompts returns those of session
// sessionID of scope, oldest first (by time, then by id), after after when
// set, at most limit; ErrBadCursor when after names no prompt the store
// could have kept.
type PromptStore interface {
	AddPrompt(ctx context.Context, p *PromptRecord) error
	ListPrompts(ctx context.Context, scope Scope, sessionID string, after *Cursor, limit int) ([]PromptRecord, error)
}

// ErrBadCursor means a cursor the store did not make.
var ErrBadCursor = errors.New("not a cursor of this listing")

// ErrPromptLoggingOff means prompts are not logged on this server.
var ErrPromptLoggingOff = errors.New("prompt logging is off")

type sessionKey struct{}

type sessionRef struct {
	scope Scope
	id    string
}

// withSession tells LogPrompt, through the model call's context, whose
// prompt it is.
func withSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, sessionRef{s.Scope, s.ID})
}

// LogPrompt stores p, masked, for the session the context names
// (sqlgen.PromptLog); a call outside a session, or a store that fails, is
// not logged: logging never fails a user's request.
func (a *Agent) LogPrompt(ctx context.Context, p sqlgen.Prompt) {
	ref, ok := ctx.Value(sessionKey{}).(sessionRef)
	if !ok {
		return
	}
	p.Answer, p.Error = MaskSecrets(p.Answer), MaskSecrets(p.Error)
	msgs := make([]sqlgen.PromptMessage, len(p.Messages))
	for i, m := range p.Messages {
		msgs[i] = sqlgen.PromptMessage{Role: m.Role, Content: MaskSecrets(m.Content)}
	}
	p.Messages = msgs
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = a.store.AddPrompt(sctx, &PromptRecord{Scope: ref.scope, SessionID: ref.id, Prompt: p})
}

// ListPrompts returns the logged prompts of session id of scope, oldest
// first, after after when set, and whether more follow them
// (ErrNotFound when there is no such session); a limit of 0 means 50, and
// more than 500 is 500.
func (a *Agent) ListPrompts(ctx context.Context, scope Scope, id string, after *Cursor, limit int) ([]PromptRecord, bool, error) {
	if !a.opts.PromptLogging {
		return nil, false, ErrPromptLoggingOff
	}
	if _, err := a.store.Get(ctx, scope, id); err != nil {
		return nil, false, err
	}
	limit = pageLimit(limit)
	prompts, err := a.store.ListPrompts(ctx, scope, id, after, limit+1)
	return page(prompts, err, limit)
}

// secretPatterns find what MaskSecrets hides: the password of a URL's
// user info (postgres://am:pw@host), of a Go MySQL DSN (user:pw@tcp(...)),
// a key=value or key: value whose key names a secret (libpq's
// password=..., api_key: ...), and a bearer token. Each keeps the text up
// to the secret (group 1) and masks the rest of the match.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@\s]*:)[^@\s]+(@)`),
	regexp.MustCompile(`(\b[^\s:@/()]+:)[^@\s]+(@(?:tcp|unix)\()`),
	regexp.MustCompile(`(?i)(\b(?:password|passwd|pwd|secret|token|api[_-]?key|apikey)["']?\s*[=:]\s*)(?:'[^']*'|"[^"]*"|[^\s;,&]+)()`),
	regexp.MustCompile(`(?i)(\bbearer\s+)[a-z0-9._~+/=-]+()`),
}

// MaskSecrets replaces the secrets secretPatterns find with ***.
func MaskSecrets(s string) string {
	for _, re := range secretPatterns {
		s = re.ReplaceAllString(s, "${1}***${2}")
	}
	return s
}
