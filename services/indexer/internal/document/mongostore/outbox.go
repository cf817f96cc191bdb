package mongostore

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/events"
)

// Relay tuning.
const (
	// SweepInterval is how often the relays read every document and job
	// for entries nobody named (a failed publish, a process that died
	// before relaying): a safety net, since every write names its record
	// to the relay. A sweep on FerretDB parses every record of the
	// collection, raw content included, so it is rare.
	SweepInterval = 30 * time.Second
	// relayConcurrency is how many records a relay publishes at once; above
	// one, a single writer's entries are published as handed over, unread.
	relayConcurrency = 8
	// relayRemovalDelay lets the removal of a record's published entries
	// take those of its next writes along (a job writes three in a row).
	relayRemovalDelay = time.Second
)

// outbox hands the entries the store writes to the relays of documents
// and jobs, and remembers which records were named and not relayed yet,
// for FlushOutbox.
type outbox struct {
	single bool

	mu     sync.Mutex
	relays map[string]*events.Relay       // guarded by mu: by collection name
	dirty  map[string]map[string]struct{} // guarded by mu: by collection name, records named and not drained
}

func (o *outbox) init(s *Store) {
	o.single = s.single
	o.relays = map[string]*events.Relay{}
	o.dirty = map[string]map[string]struct{}{}
}

// setRelay makes writes to coll name r.
func (o *outbox) setRelay(coll *mongo.Collection, r *events.Relay) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.relays[coll.Name()] = r
}

// wrote names record id of coll, just written with entries, to its relay.
// The caller holds the record's lock, so a single writer's entries reach
// the relay in the order of the writes (events.Relay.NotifyEntries);
// otherwise the relay reads the record. Before the relay runs there is
// none to tell: its first sweep publishes what was written.
func (o *outbox) wrote(coll *mongo.Collection, id string, entries []events.OutboxEntry) {
	o.name(coll, id, entries, o.single)
}

// unsure names record id of coll to a single writer's relay after a write
// of entries that returned err: if err is not nil the write may still have
// been applied, and the relay, whose polls do not sweep the collection
// (events.Relay.SetSingleWriter), reads the record. With many writers the
// relay's sweeps find such entries.
func (o *outbox) unsure(coll *mongo.Collection, id string, entries []events.OutboxEntry, err error) {
	if err != nil && o.single {
		o.name(coll, id, entries, false)
	}
}

// name tells coll's relay about record id, written with entries: given,
// the entries themselves, else that it must read the record.
func (o *outbox) name(coll *mongo.Collection, id string, entries []events.OutboxEntry, given bool) {
	if len(entries) == 0 {
		return
	}
	o.mu.Lock()
	r := o.relays[coll.Name()]
	if r != nil {
		ids := o.dirty[coll.Name()]
		if ids == nil {
			ids = map[string]struct{}{}
			o.dirty[coll.Name()] = ids
		}
		ids[id] = struct{}{}
	}
	o.mu.Unlock()
	switch {
	case r == nil:
	case given:
		r.NotifyEntries(id, entries...)
	default:
		r.NotifyDocument(id)
	}
}

// relay returns the relay of coll, nil before RunOutbox set it.
func (o *outbox) relay(coll *mongo.Collection) *events.Relay {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.relays[coll.Name()]
}

// drained forgets record id of coll: its relay published its outbox.
func (o *outbox) drained(coll *mongo.Collection, id any) {
	if sid, ok := id.(string); ok {
		o.mu.Lock()
		delete(o.dirty[coll.Name()], sid)
		o.mu.Unlock()
	}
}

// named returns the records of coll named and not known drained.
func (o *outbox) named(coll *mongo.Collection) []any {
	o.mu.Lock()
	defer o.mu.Unlock()
	ids := make([]any, 0, len(o.dirty[coll.Name()]))
	for id := range o.dirty[coll.Name()] {
		ids = append(ids, id)
	}
	return ids
}

// newRelay returns the relay of coll's outboxes. Its removals take
// mongox.LockDocument (the default), as the store's writes do.
func (s *Store) newRelay(bus *events.Bus, coll *mongo.Collection, log *slog.Logger) *events.Relay {
	r := events.NewRelay(bus, coll, log)
	r.SetConcurrency(relayConcurrency)
	r.SetRemovalDelay(relayRemovalDelay)
	r.SetPollInterval(SweepInterval)
	if s.single {
		r.SetSingleWriter() // wrote and unsure name every write to it
	}
	r.SetDrained(func(_ context.Context, id any) error {
		s.out.drained(coll, id)
		return nil
	})
	return r
}

// RunOutbox publishes the outbox entries of documents and jobs on bus
// until ctx is done: at once whatever an earlier process left (a sweep),
// then each record as a write names it, and every SweepInterval a sweep
// again (with many writers; a single writer's relay then reads again only
// the records whose relay failed). Errors are logged and retried.
func (s *Store) RunOutbox(ctx context.Context, bus *events.Bus, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, coll := range []*mongo.Collection{s.docs, s.jobs} {
		r := s.newRelay(bus, coll, log)
		s.out.setRelay(coll, r)
		wg.Go(func() { _ = r.Run(ctx) })
	}
	wg.Wait()
}

// FlushOutbox publishes, at shutdown after RunOutbox returned, the
// entries of the records written since it started and not relayed yet,
// reading each by _id. What it misses the next start's sweep publishes.
func (s *Store) FlushOutbox(ctx context.Context, bus *events.Bus) error {
	var errs []error
	for _, coll := range []*mongo.Collection{s.docs, s.jobs} {
		if ids := s.out.named(coll); len(ids) > 0 {
			if _, err := s.newRelay(bus, coll, nil).SweepDocuments(ctx, ids...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// FlushDocument publishes, and removes, the pending outbox entries of the
// document with _id id, reading it by _id, before the caller removes the
// record: with many writers the relay reads what it publishes, and would
// find nothing once the record is gone. For a single writer the relay was
// handed the entries themselves and publishes them whether or not the
// record is still there, and before RunOutbox there is no relay to
// publish with: it does nothing then.
func (s *Store) FlushDocument(ctx context.Context, id string) error {
	r := s.out.relay(s.docs)
	if s.single || r == nil {
		return nil
	}
	_, err := r.SweepDocuments(ctx, id)
	return err
}
