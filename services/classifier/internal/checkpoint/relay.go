package checkpoint

import (
	"context"
	"log/slog"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/mongox"
)

// Intervals of the store's background work.
const (
	// ArchiveInterval is how often the service looks for finished runs
	// left in the live collection (ArchiveFinished): a process that
	// stopped between a run's last events and its archiving, or an
	// archiving that failed.
	ArchiveInterval = 30 * time.Second
	// SweepInterval is how often the relay sweeps every run for events
	// nobody named (a failed publish, a process that died). A sweep on
	// FerretDB decodes every live run, about half a millisecond each, so
	// it is rarer than the relay's default; named runs go out at once.
	SweepInterval = 30 * time.Second

	// relayConcurrency is how many runs the relay publishes at once.
	relayConcurrency = 16
	// relayRemovalDelay is how long published events stay in their run
	// before they are removed: the events of the steps that follow within
	// it go with the same write.
	relayRemovalDelay = 250 * time.Millisecond
)

// NewRelay returns the events relay of the store's outboxes, as the service
// runs it, and makes the store tell it about every entry it writes (see
// wrote): removals of published events take the run's write lock, and a
// finished run is archived once its last events are out. What the store
// did not write (a previous process's events) waits for a sweep: at start,
// and every SweepInterval with many writers (a single writer's relay polls
// only the runs whose relay failed). Call it before the store's first write.
func (s *Store) NewRelay(bus *events.Bus, log *slog.Logger) *events.Relay {
	r := events.NewRelay(bus, s.coll, log)
	r.SetDocumentLock(s.LockDocument)
	r.SetDrained(s.Drained)
	r.SetPublished(s.published)
	r.SetGone(s.gone)
	r.SetPollInterval(SweepInterval)
	r.SetConcurrency(relayConcurrency)
	r.SetRemovalDelay(relayRemovalDelay)
	if mongox.SingleWriter(s.coll.Database()) {
		r.SetSingleWriter() // wrote and unsure name every write to it
	}
	s.relay = r // before the first write, as the doc says: wrote reads it unlocked
	return r
}

// KeepArchiving runs ArchiveFinished now and every ArchiveInterval until
// ctx is done, logging what it could not do.
func (s *Store) KeepArchiving(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(ArchiveInterval)
	defer t.Stop()
	for {
		if err := s.ArchiveFinished(ctx); err != nil && ctx.Err() == nil {
			log.Warn("finished runs not archived yet; will retry", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
