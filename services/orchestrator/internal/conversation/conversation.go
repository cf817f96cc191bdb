// Package conversation holds the chat loop's stored state: conversations,
// their messages, and the turn lease that lets only one message at a time be
// processed in a conversation, across every replica of the service.
//
// The package declares the Store it needs; memstore and mongostore implement
// it with the same behaviour, which storetest checks by running one suite
// over both.
package conversation

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Failures of Store operations. Stores wrap them; test with errors.Is.
var (
	// ErrNotFound means no conversation with that id exists in the scope.
	ErrNotFound = errors.New("conversation not found")
	// ErrAlreadyExists means a conversation with that id exists already.
	ErrAlreadyExists = errors.New("conversation already exists")
	// ErrBusy means another turn holds the conversation's lease: a message
	// is being processed.
	ErrBusy = errors.New("conversation is busy with another message")
	// ErrLeaseLost means the caller's lease expired and was taken over, or
	// the conversation was deleted, so the caller must stop writing.
	ErrLeaseLost = errors.New("turn lease lost")
	// ErrInvalidPageToken means a page token was not issued by List for the
	// same query.
	ErrInvalidPageToken = errors.New("invalid page token")
)

// Scope is the tenant and project that own a conversation. Every Store
// operation is confined to one scope.
type Scope struct {
	// TenantID is required.
	TenantID string
	// ProjectID may be empty (the tenant's default project).
	ProjectID string
}

// Role is who wrote a message.
type Role string

// The roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Conversation is a chat thread, without its messages.
type Conversation struct {
	// ID is unique among all conversations.
	ID string
	// Scope owns it.
	Scope Scope
	// Caller created it.
	Caller string
	// Title is free text.
	Title string
	// Strategy names the model strategy its turns use.
	Strategy string
	// CreateTime and UpdateTime are set by the caller of Create and by
	// ReleaseLease, at millisecond precision.
	CreateTime, UpdateTime time.Time
	// Lease is the current turn lease; the zero Lease when free.
	Lease Lease
}

// Lease is the right to process one message in a conversation. Stores take
// it atomically across every process sharing the store (mongostore with a
// unique-index insert), so two replicas cannot both hold it; it expires at
// Until unless renewed, so a crashed holder does not block the conversation
// forever.
type Lease struct {
	// ID identifies this holding; Renew and Release must present it.
	ID string
	// Holder names the process holding it, for error messages.
	Holder string
	// Until is when it expires.
	Until time.Time
	// Gen is set by AcquireLease: the store's sequence number of this
	// holding. RenewLease and ReleaseLease take the Lease AcquireLease
	// returned, so stores can find it without a query.
	Gen int64
}

// Held reports whether the lease is held at now.
func (l Lease) Held(now time.Time) bool { return l.ID != "" && now.Before(l.Until) }

// ToolCall is a tool call made by an assistant turn.
type ToolCall struct {
	// ID is the call id the tool result quotes.
	ID string
	// Name is the tool name.
	Name string
	// Arguments is the arguments object as JSON text.
	Arguments string
}

// Message is one stored message.
type Message struct {
	// ID is unique among all messages.
	ID string
	// Seq orders the messages of a conversation, from 1. Appending a Seq
	// that exists already fails: a stale lease holder cannot interleave.
	Seq int64
	// Role is who wrote it.
	Role Role
	// Content is the text.
	Content string
	// Reasoning is an assistant turn's chain of thought. It is sent back to
	// the model with the turn's tool calls (DeepSeek requires it).
	Reasoning string
	// ToolCalls are an assistant turn's tool calls.
	ToolCalls []ToolCall
	// ToolCallID and ToolName identify the call a tool message answers.
	ToolCallID, ToolName string
	// ToolError is true for a tool message reporting a failure.
	ToolError bool
	// Cancelled is true when the turn was cut short by a client disconnect.
	Cancelled bool
	// CreateTime is when it was stored, at millisecond precision.
	CreateTime time.Time
}

// ListQuery selects a page of conversations.
type ListQuery struct {
	// Caller, if set, keeps only that caller's conversations.
	Caller string
	// PageSize is the page length; stores treat <= 0 as 50.
	PageSize int
	// PageToken continues a previous List.
	PageToken string
	// CreatedFrom and CreatedTo, when not zero, keep conversations created
	// at or after CreatedFrom and before CreatedTo.
	CreatedFrom, CreatedTo time.Time
}

// Created reports whether a conversation created at t is in q's time
// range, with the bounds at the millisecond precision times are stored at.
func (q ListQuery) Created(t time.Time) bool {
	return (q.CreatedFrom.IsZero() || !t.Before(Millis(q.CreatedFrom))) && (q.CreatedTo.IsZero() || t.Before(Millis(q.CreatedTo)))
}

// Store keeps conversations and messages. Implementations are safe for
// concurrent use; every method is confined to scope and reports a
// conversation outside it as ErrNotFound.
type Store interface {
	// Create stores c. It fails with ErrAlreadyExists if c.ID is taken.
	Create(ctx context.Context, c *Conversation) error
	// Get returns one conversation, or ErrNotFound.
	Get(ctx context.Context, scope Scope, id string) (*Conversation, error)
	// List returns conversations newest first (by CreateTime, then ID) and
	// the token of the next page, empty at the end.
	List(ctx context.Context, scope Scope, q ListQuery) ([]*Conversation, string, error)
	// Delete removes a conversation and its messages. It fails with
	// ErrNotFound, or ErrBusy while a turn holds the lease at now.
	Delete(ctx context.Context, scope Scope, id string, now time.Time) error

	// Messages returns the last `last` messages of a conversation in Seq
	// order (all of them when last <= 0), or ErrNotFound.
	Messages(ctx context.Context, scope Scope, id string, last int) ([]Message, error)
	// Append stores messages, which carry their Seq, in ascending order
	// after every stored one. A Seq already stored fails the call with
	// ErrLeaseLost (someone else is writing); messages before it in the call
	// may have been stored. Only the lease holder appends; appending to a
	// conversation that does not exist is undefined.
	Append(ctx context.Context, scope Scope, id string, msgs ...Message) error

	// AcquireLease takes the turn lease if it is free or expired at now,
	// returning the conversation with the new lease. It fails with
	// ErrNotFound, or ErrBusy (wrapped in a *BusyError) when another holder
	// has it.
	AcquireLease(ctx context.Context, scope Scope, id string, lease Lease, now time.Time) (*Conversation, error)
	// RenewLease moves the expiry of lease, as AcquireLease returned it, to
	// until. It fails with ErrLeaseLost if that lease is no longer held.
	RenewLease(ctx context.Context, scope Scope, id string, lease Lease, until time.Time) error
	// ReleaseLease frees lease, as AcquireLease returned it, and sets the
	// conversation's UpdateTime to now. It fails with ErrLeaseLost if that
	// lease is no longer held.
	ReleaseLease(ctx context.Context, scope Scope, id string, lease Lease, now time.Time) error
}

// DeletionLog is a Store that records each Delete until what the deleted
// conversation leaves outside the store is gone too (its turns' events,
// whose answers a delete must not leave behind), and finishes the deletes
// a crash or a failure cut. The memory store keeps no such record.
type DeletionLog interface {
	// Forgotten drops the record of the delete of conversation id: what it
	// left elsewhere is gone.
	Forgotten(ctx context.Context, id string) error
	// FinishDeletions finishes the deletes recorded a while before now (a
	// younger one may be under way): the store's part, then forget's, then
	// the record goes. It reports how many it finished; a record forget
	// failed on stays for the next call.
	FinishDeletions(ctx context.Context, now time.Time, forget func(context.Context, Deletion) error) (int, error)
}

// Deletion is a conversation deleted from its store.
type Deletion struct {
	Scope Scope
	ID    string
}

// BusyError is the ErrBusy failure with who holds the lease.
type BusyError struct {
	// Holder is the process holding the lease.
	Holder string
	// Until is when the lease expires unless renewed.
	Until time.Time
}

// Error implements error.
func (e *BusyError) Error() string {
	return fmt.Sprintf("%v (held by %s until %s)", ErrBusy, e.Holder, e.Until.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Unwrap() error { return ErrBusy }

// Millis truncates t to the millisecond precision every store keeps, in UTC.
func Millis(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// DefaultPageSize and MaxPageSize bound List pages.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// PageSize clamps a requested page size to [1, MaxPageSize], 0 meaning
// DefaultPageSize.
func PageSize(n int) int {
	switch {
	case n <= 0:
		return DefaultPageSize
	case n > MaxPageSize:
		return MaxPageSize
	}
	return n
}

// Cursor is the position after the last conversation of a page: List
// continues with conversations strictly older than it.
type Cursor struct {
	// CreateTime and ID of the last conversation returned.
	CreateTime time.Time
	// ID breaks ties between equal CreateTimes.
	ID string
	// Filter fingerprints the scope and filters of the query (Filter), so
	// a token cannot be replayed against another query or by another
	// scope.
	Filter string
}

type cursorJSON struct {
	T int64  `json:"t"`
	I string `json:"i"`
	F string `json:"f"`
}

// Filter fingerprints a listing of scope with q's filters (not its page
// size or token): the page tokens of that listing carry it.
func Filter(scope Scope, q ListQuery) string {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s\x00%d\x00%d", scope.TenantID, scope.ProjectID, q.Caller,
		ms(q.CreatedFrom), ms(q.CreatedTo)))
	return base64.RawURLEncoding.EncodeToString(sum[:9])
}

// EncodeCursor returns c as an opaque page token.
func EncodeCursor(c Cursor) string {
	b, _ := json.Marshal(cursorJSON{T: c.CreateTime.UnixMilli(), I: c.ID, F: c.Filter})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor parses a page token of a listing whose Filter is filter.
// An empty token yields (nil, nil); a malformed one, or one of another
// listing, ErrInvalidPageToken.
func DecodeCursor(token, filter string) (*Cursor, error) {
	if token == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return nil, ErrInvalidPageToken
	}
	var c cursorJSON
	if err := json.Unmarshal(b, &c); err != nil || c.I == "" || c.F != filter {
		return nil, ErrInvalidPageToken
	}
	return &Cursor{CreateTime: time.UnixMilli(c.T).UTC(), ID: c.I, Filter: c.F}, nil
}

// Before reports whether a conversation with createTime and id sorts after
// the cursor in newest-first order, i.e. belongs on a later page.
func (c *Cursor) Before(createTime time.Time, id string) bool {
	if c == nil {
		return true
	}
	if !createTime.Equal(c.CreateTime) {
		return createTime.Before(c.CreateTime)
	}
	return id < c.ID
}
