package mongostore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// touchEvery is how long a single writer may keep a conversation's touch
// (the update time and lease generation a turn's release sets) before it
// writes it. Written at every release, the touch was a third of a turn's
// writes, and on FerretDB an update reads, parses and rewrites its
// document. Held for a second, a conversation's turns in that second make
// one write: the growth bench's chat row (50 conversations, a turn every
// ~170 ms each) went from 248.8 / 271.3 / 259.3 to 369.0 / 311.9 / 353.9
// turns/s at 0 stored (2026-11-27, 15 s rows, alternating). A killed
// process loses at most that second of update times; no message depends
// on them, and lease generations are a hint readers probe past (see
// convDoc.LeaseGen).
const touchEvery = time.Second

// touchWriteTimeout bounds a background flush of the touches, so that one
// stuck on a lost connection cannot hold the next flush, or Close, longer.
const touchWriteTimeout = 30 * time.Second

// touch is a conversation's update time and lease generation as a
// release set them, not yet written (a single writer's).
type touch struct {
	updateTime time.Time
	leaseGen   int64
}

// touches holds a single writer's unwritten touches and writes them in the
// background, at most touchEvery after the first of them (see touchEvery).
// Until a touch is written, reads of its conversation apply it (apply), so
// nobody sees an update time go back.
type touches struct {
	mu      sync.Mutex
	pending map[string]touch // guarded by mu: conversation id → newest touch
	timer   *time.Timer      // guarded by mu: the scheduled flush, nil if none
	closed  bool             // guarded by mu: Close ran; touches are written at once

	// flushing admits one flush at a time, so a touch never overwrites a
	// newer one; a flush waits for its turn only as long as its context
	// lets it.
	flushing chan struct{}
	write    func(ctx context.Context, id string, t touch) error

	// log hears of background flushes that fail, and of the first that
	// succeeds after them: once each, not every second while the
	// database is away.
	log     *slog.Logger
	failing bool // guarded by flushing: the last background flush failed
}

func newTouches(write func(ctx context.Context, id string, t touch) error, log *slog.Logger) *touches {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &touches{pending: map[string]touch{}, flushing: make(chan struct{}, 1), write: write, log: log}
}

// flushLater is the scheduled flush, bounded by touchWriteTimeout. What
// failed stays pending, for the next flush; the log hears when writes
// start failing and when they work again.
func (ts *touches) flushLater() {
	ctx, cancel := context.WithTimeout(context.Background(), touchWriteTimeout)
	defer cancel()
	_ = ts.flush(ctx, ts.report)
}

// report tells the log how a background flush went, if it went otherwise
// than the one before; the caller holds flushing.
func (ts *touches) report(err error, left int) {
	switch {
	case err != nil && !ts.failing:
		ts.log.Warn("conversation update times not written; trying again every second",
			"pending", left, "retry", touchEvery, slog.Any("error", err))
	case err == nil && ts.failing:
		ts.log.Info("conversation update times written again", "pending", left)
	}
	ts.failing = err != nil
}

// set records t as id's newest touch, to be written within touchEvery.
// After close it is written before set returns.
func (ts *touches) set(ctx context.Context, id string, t touch) error {
	ts.mu.Lock()
	ts.pending[id] = t
	closed := ts.closed
	ts.scheduleLocked()
	ts.mu.Unlock()
	if closed {
		return ts.flush(ctx, nil)
	}
	return nil
}

// apply sets d's update time and lease generation to its unwritten touch,
// if any.
func (ts *touches) apply(d *convDoc) {
	ts.mu.Lock()
	t, ok := ts.pending[d.ID]
	ts.mu.Unlock()
	if ok && t.updateTime.After(d.UpdateTime) {
		d.UpdateTime = t.updateTime
	}
	if ok && t.leaseGen > d.LeaseGen {
		d.LeaseGen = t.leaseGen
	}
}

// drop forgets id's unwritten touch (its conversation is deleted).
func (ts *touches) drop(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.pending, id)
}

// flush writes every unwritten touch. A touch leaves pending only once it
// is written and no newer one replaced it meanwhile; one whose write
// failed stays, for the next flush. done, if not nil, hears the result and
// how many touches are left pending, before the next flush may start.
func (ts *touches) flush(ctx context.Context, done func(err error, left int)) error {
	select {
	case ts.flushing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mongostore: touches not written: %w", ctx.Err())
	}
	defer func() { <-ts.flushing }()
	ts.mu.Lock()
	ts.timer = nil
	batch := maps.Clone(ts.pending)
	ts.mu.Unlock()
	var errs []error
	for id, t := range batch {
		if err := ts.write(ctx, id, t); err != nil {
			errs = append(errs, err)
			continue
		}
		ts.mu.Lock()
		if ts.pending[id] == t {
			delete(ts.pending, id)
		}
		ts.mu.Unlock()
	}
	err := errors.Join(errs...)
	ts.mu.Lock()
	left := len(ts.pending)
	ts.scheduleLocked()
	ts.mu.Unlock()
	if done != nil {
		done(err, left)
	}
	return err
}

// scheduleLocked schedules a flush touchEvery from now if touches are
// pending and none is scheduled, unless Close ran; the caller holds mu.
func (ts *touches) scheduleLocked() {
	if len(ts.pending) > 0 && ts.timer == nil && !ts.closed {
		ts.timer = time.AfterFunc(touchEvery, ts.flushLater)
	}
}

// close writes every unwritten touch; touches set after it are written at
// once.
func (ts *touches) close(ctx context.Context) error {
	ts.mu.Lock()
	ts.closed = true
	if ts.timer != nil {
		ts.timer.Stop()
		ts.timer = nil
	}
	ts.mu.Unlock()
	return ts.flush(ctx, nil)
}

// writeTouch stores t on the conversation document id (none if it was
// deleted: no upsert).
func (s *Store) writeTouch(ctx context.Context, id string, t touch) error {
	if _, err := s.convs.UpdateOne(ctx, byID(id), bson.D{{Key: "$set", Value: bson.D{
		{Key: "update_time", Value: t.updateTime},
		{Key: "lease_gen", Value: t.leaseGen},
	}}}); err != nil {
		return fmt.Errorf("mongostore: touch %s: %w", id, mongox.Translate(err))
	}
	return nil
}

// Close writes what a single writer holds back (its conversations' update
// times, see touchEvery). The store stays usable: later releases write
// their touch at once.
func (s *Store) Close(ctx context.Context) error {
	return s.touches.close(ctx)
}
