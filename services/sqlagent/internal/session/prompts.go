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
	Scope     Scope
	SessionID string
	sqlgen.Prompt
}

// PromptStore keeps logged prompts. ListPrompts returns those of session
// sessionID of scope, oldest first, at most limit.
type PromptStore interface {
	AddPrompt(ctx context.Context, p *PromptRecord) error
	ListPrompts(ctx context.Context, scope Scope, sessionID string, limit int) ([]PromptRecord, error)
}

// ErrPromptLoggingOff means prompts are not logged on this server.
var ErrPromptLoggingOff = errors.New("prompt logging is off")

// maxPrompts bounds a listing of one session's prompts.
const maxPrompts = 500

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
// first (ErrNotFound when there is no such session).
func (a *Agent) ListPrompts(ctx context.Context, scope Scope, id string) ([]PromptRecord, error) {
	if !a.opts.PromptLogging {
		return nil, ErrPromptLoggingOff
	}
	if _, err := a.store.Get(ctx, scope, id); err != nil {
		return nil, err
	}
	return a.store.ListPrompts(ctx, scope, id, maxPrompts)
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
