// Package memstore keeps conversations in process memory: zero setup, lost
// on restart, and visible to this replica only (its turn lease cannot stop
// a second replica). It behaves like mongostore otherwise; storetest runs
// the same suite over both.
package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

var _ conversation.Store = (*Store)(nil)

// Store is an in-memory conversation.Store. It is safe for concurrent use.
type Store struct {
	mu    sync.Mutex // guards convs
	convs map[string]*entry
}

type entry struct {
	conv conversation.Conversation
	msgs []conversation.Message // in Seq order
	gen  int64                  // generation of the last lease taken
}

// New returns an empty Store.
func New() *Store {
	return &Store{convs: map[string]*entry{}}
}

// lookup returns the entry with id in scope, or nil. s.mu must be held.
func (s *Store) lookup(scope conversation.Scope, id string) *entry {
	e := s.convs[id]
	if e == nil || e.conv.Scope != scope {
		return nil
	}
	return e
}

func notFound(id string) error { return fmt.Errorf("%w: %s", conversation.ErrNotFound, id) }

// Create implements conversation.Store.
func (s *Store) Create(_ context.Context, c *conversation.Conversation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.convs[c.ID]; ok {
		return fmt.Errorf("%w: %s", conversation.ErrAlreadyExists, c.ID)
	}
	cp := *c
	cp.CreateTime = conversation.Millis(c.CreateTime)
	cp.UpdateTime = conversation.Millis(c.UpdateTime)
	cp.Lease = conversation.Lease{}
	s.convs[c.ID] = &entry{conv: cp}
	return nil
}

// Get implements conversation.Store.
func (s *Store) Get(_ context.Context, scope conversation.Scope, id string) (*conversation.Conversation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil {
		return nil, notFound(id)
	}
	cp := e.conv
	return &cp, nil
}

// List implements conversation.Store.
func (s *Store) List(_ context.Context, scope conversation.Scope, q conversation.ListQuery) ([]*conversation.Conversation, string, error) {
	filterKey := conversation.Filter(scope, q)
	cur, err := conversation.DecodeCursor(q.PageToken, filterKey)
	if err != nil {
		return nil, "", err
	}
	size := conversation.PageSize(q.PageSize)
	s.mu.Lock()
	var all []*conversation.Conversation
	for _, e := range s.convs {
		c := e.conv
		if c.Scope != scope || (q.Caller != "" && c.Caller != q.Caller) || !cur.Before(c.CreateTime, c.ID) || !q.Created(c.CreateTime) {
			continue
		}
		all = append(all, &c)
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreateTime.Equal(all[j].CreateTime) {
			return all[i].CreateTime.After(all[j].CreateTime)
		}
		return all[i].ID > all[j].ID
	})
	if len(all) <= size {
		return all, "", nil
	}
	page := all[:size]
	last := page[len(page)-1]
	return page, conversation.EncodeCursor(conversation.Cursor{CreateTime: last.CreateTime, ID: last.ID, Filter: filterKey}), nil
}

// Delete implements conversation.Store.
func (s *Store) Delete(_ context.Context, scope conversation.Scope, id string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil {
		return notFound(id)
	}
	if e.conv.Lease.Held(now) {
		return &conversation.BusyError{Holder: e.conv.Lease.Holder, Until: e.conv.Lease.Until}
	}
	delete(s.convs, id)
	return nil
}

// Messages implements conversation.Store.
func (s *Store) Messages(_ context.Context, scope conversation.Scope, id string, last int) ([]conversation.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil {
		return nil, notFound(id)
	}
	msgs := e.msgs
	if last > 0 && len(msgs) > last {
		msgs = msgs[len(msgs)-last:]
	}
	out := make([]conversation.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
		out[i].ToolCalls = slices.Clone(m.ToolCalls)
	}
	return out, nil
}

// Append implements conversation.Store.
func (s *Store) Append(_ context.Context, scope conversation.Scope, id string, msgs ...conversation.Message) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil {
		return notFound(id)
	}
	for _, m := range msgs {
		i, found := slices.BinarySearchFunc(e.msgs, m.Seq, func(x conversation.Message, seq int64) int {
			switch {
			case x.Seq < seq:
				return -1
			case x.Seq > seq:
				return 1
			}
			return 0
		})
		if found {
			return fmt.Errorf("%w: message seq %d of %s is taken", conversation.ErrLeaseLost, m.Seq, id)
		}
		m.ToolCalls = slices.Clone(m.ToolCalls)
		m.CreateTime = conversation.Millis(m.CreateTime)
		e.msgs = slices.Insert(e.msgs, i, m)
	}
	return nil
}

// AcquireLease implements conversation.Store.
func (s *Store) AcquireLease(_ context.Context, scope conversation.Scope, id string, lease conversation.Lease, now time.Time) (*conversation.Conversation, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil {
		return nil, notFound(id)
	}
	if e.conv.Lease.Held(now) {
		return nil, &conversation.BusyError{Holder: e.conv.Lease.Holder, Until: e.conv.Lease.Until}
	}
	lease.Until = conversation.Millis(lease.Until)
	lease.Gen = e.gen + 1
	e.gen = lease.Gen
	e.conv.Lease = lease
	cp := e.conv
	return &cp, nil
}

// RenewLease implements conversation.Store.
func (s *Store) RenewLease(_ context.Context, scope conversation.Scope, id string, lease conversation.Lease, until time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil || lease.ID == "" || e.conv.Lease.ID != lease.ID {
		return fmt.Errorf("%w: %s", conversation.ErrLeaseLost, id)
	}
	e.conv.Lease.Until = conversation.Millis(until)
	return nil
}

// ReleaseLease implements conversation.Store.
func (s *Store) ReleaseLease(_ context.Context, scope conversation.Scope, id string, lease conversation.Lease, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.lookup(scope, id)
	if e == nil || lease.ID == "" || e.conv.Lease.ID != lease.ID {
		return fmt.Errorf("%w: %s", conversation.ErrLeaseLost, id)
	}
	e.conv.Lease = conversation.Lease{}
	e.conv.UpdateTime = conversation.Millis(now)
	return nil
}
