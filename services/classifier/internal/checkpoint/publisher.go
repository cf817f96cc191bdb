package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Publisher tuning.
const (
	// ScanInterval is how often the Publisher scans every checkpoint for
	// pending events (what a crashed process, or a failed publish, left).
	ScanInterval = 30 * time.Second
	// retryInterval is how soon runs whose publish failed are retried.
	retryInterval = time.Second
	// publishTimeout bounds the publish of one entry.
	publishTimeout = 5 * time.Second
	// removeTimeout bounds the removal of published entries.
	removeTimeout = 5 * time.Second
)

// Publisher relays the run events waiting in checkpoint outboxes to NATS
// JetStream, following the libs/events outbox pattern: entries of a
// document are published in order with Nats-Msg-Id = event id (so a
// re-publish is stored once), then removed with a $pullAll of exactly the
// elements read.
//
// It differs from events.Relay in two ways the embedded store needs. It
// publishes the one run whose checkpoint was just written (Notify(runID)),
// found by _id, instead of scanning the collection for non-empty outboxes —
// FerretDB cannot serve that query from an index, so a scan costs about half
// a millisecond per stored run. And it removes published entries under the
// store's write lock, so a removal never races a checkpoint write (see
// Store). The full scan still runs at start and every ScanInterval, without
// the lock. Once a finished run's events are all published, it archives the
// run (Store.Archive).
//
// One goroutine (Run) publishes, so a run's events go out in order. A
// Publisher is safe for concurrent use.
type Publisher struct {
	store *Store
	bus   *events.Bus
	log   *slog.Logger
	wake  chan struct{} // capacity 1: coalesced Notify calls

	mu    sync.Mutex      // guards dirty
	dirty map[string]bool // runs with entries to publish
}

// NewPublisher returns a publisher of store's outboxes on bus.
func NewPublisher(store *Store, bus *events.Bus, log *slog.Logger) *Publisher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Publisher{
		store: store, bus: bus, log: log.With(slog.String("component", "run-event-publisher")),
		wake: make(chan struct{}, 1), dirty: map[string]bool{},
	}
}

// Notify asks for the pending events of run runID to be published soon. It
// never blocks.
func (p *Publisher) Notify(runID string) {
	p.mu.Lock()
	p.dirty[runID] = true
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Run publishes until ctx is done: everything pending at once, then each
// notified run, retrying failed runs every second and scanning everything
// every ScanInterval.
func (p *Publisher) Run(ctx context.Context) {
	scan := time.NewTicker(ScanInterval)
	defer scan.Stop()
	retry := time.NewTicker(retryInterval)
	defer retry.Stop()
	if err := p.Scan(ctx); err != nil && ctx.Err() == nil {
		p.log.Warn("run event scan incomplete; will retry", slog.Any("error", err))
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		case <-retry.C:
		case <-scan.C:
			if err := p.Scan(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("run event scan incomplete; will retry", slog.Any("error", err))
			}
		}
		if err := p.Flush(ctx); err != nil && ctx.Err() == nil {
			p.log.Warn("run events not published yet; will retry", slog.Any("error", err))
		}
	}
}

// Flush publishes the pending events of every notified run now. Runs whose
// publish failed stay notified for the next Flush. Run calls Flush; call it
// directly at shutdown.
func (p *Publisher) Flush(ctx context.Context) error {
	p.mu.Lock()
	ids := make([]string, 0, len(p.dirty))
	for id := range p.dirty {
		ids = append(ids, id)
	}
	p.dirty = map[string]bool{}
	p.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := p.publishRun(ctx, id); err != nil {
			errs = append(errs, err)
			p.mu.Lock()
			p.dirty[id] = true
			p.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// Scan finds every live checkpoint with pending events, or finished and
// not archived yet, and publishes (and archives) it.
func (p *Publisher) Scan(ctx context.Context) error {
	f := bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: events.OutboxField + ".0", Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: "state", Value: bson.D{{Key: "$in", Value: bson.A{string(statemachine.Completed), string(statemachine.Stopped)}}}}},
	}}}
	cur, err := p.store.coll.Find(ctx, f, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}))
	if err != nil {
		return fmt.Errorf("checkpoint: scan outboxes: %w", mongox.Translate(err))
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		return fmt.Errorf("checkpoint: scan outboxes: %w", mongox.Translate(err))
	}
	for _, d := range docs {
		p.mu.Lock()
		p.dirty[d.ID] = true
		p.mu.Unlock()
	}
	return p.Flush(ctx)
}

// publishRun publishes one run's pending entries in order and removes the
// published ones; a failed publish stops there, keeping the order. A
// finished run whose events are all out is archived.
func (p *Publisher) publishRun(ctx context.Context, id string) error {
	var doc struct {
		State  string     `bson:"state"`
		Outbox []bson.Raw `bson:"outbox"`
	}
	proj := bson.D{{Key: events.OutboxField, Value: 1}, {Key: "state", Value: 1}}
	err := p.store.coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(proj)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: read outbox of run %s: %w", id, mongox.Translate(err))
	}
	done := make(bson.A, 0, len(doc.Outbox))
	var pubErr error
	for i, raw := range doc.Outbox {
		var e events.OutboxEntry
		if err := bson.Unmarshal(raw, &e); err != nil {
			pubErr = fmt.Errorf("checkpoint: outbox entry %d of run %s: %w", i, id, err)
			break
		}
		if err := p.publish(ctx, e); err != nil {
			pubErr = fmt.Errorf("checkpoint: publish %s of run %s: %w", e.ID, id, err)
			break
		}
		done = append(done, raw)
	}
	if len(done) == 0 {
		if pubErr == nil && statemachine.State(doc.State).Finished() {
			return p.archive(ctx, id)
		}
		return pubErr
	}
	// The removal happens even if ctx ended meanwhile, or the entries are
	// published again (harmlessly) later.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), removeTimeout)
	defer cancel()
	update := bson.D{{Key: "$pullAll", Value: bson.D{{Key: events.OutboxField, Value: done}}}}
	p.store.mu.Lock()
	_, err = p.store.coll.UpdateOne(rctx, bson.D{{Key: "_id", Value: id}}, update)
	p.store.mu.Unlock()
	if err != nil {
		return errors.Join(pubErr, fmt.Errorf("checkpoint: remove published events of run %s: %w", id, mongox.Translate(err)))
	}
	if pubErr == nil && statemachine.State(doc.State).Finished() {
		return p.archive(ctx, id)
	}
	return pubErr
}

// archive moves a finished run out of the live collection. A write that
// added events meanwhile makes Archive decline; the Notify that came with
// it brings the run back here.
func (p *Publisher) archive(ctx context.Context, id string) error {
	_, err := p.store.Archive(context.WithoutCancel(ctx), id)
	return err
}

// publish sends one entry, bounded by publishTimeout.
func (p *Publisher) publish(ctx context.Context, e events.OutboxEntry) error {
	pctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	return p.bus.PublishEntry(pctx, e)
}
