package analysis

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// liveTrees keeps the job events of the analyses created in the last
// Config.LiveTrees, as one consumer of the events stream delivers them to
// this process, so that a watch of such an analysis from the start is
// served from memory: it asks JetStream nothing. Each watch of an older
// analysis opens its own replay (Engine.Watch). Without it, every watch
// created a consumer and deleted it again: two requests that JetStream
// serves one after the other with every other request of the mesh, most of
// an analysis's time to its first event under load.
//
// A tree's events are complete here when the analysis was created after
// the consumer started (its events are published after its creation, so
// after the stream's last sequence the consumer started from) and after
// the last eviction (watermark): trees are evicted in the order they were
// first seen, which is after their creation. liveSkew allows for the clock
// of the replica that created the analysis running ahead of this one.
//
// If the consumer fails, every tree is dropped and the watches it served
// go on with their own replays, after the last event each sent (serve
// returns errLiveLost); the consumer starts again from the stream's end.
type liveTrees struct {
	bus   *events.Bus
	keep  time.Duration
	clock func() time.Time
	log   *slog.Logger

	mu        sync.Mutex
	running   bool                 // the consumer is delivering; trees are complete after watermark
	watermark time.Time            // trees created before it (plus liveSkew) may be incomplete here
	trees     map[string]*liveTree // tenant token + "." + root token → events
	order     []string             // the keys of trees, in the order first seen
	lost      chan struct{}        // closed when the consumer fails and the trees are dropped
}

// liveSkew is how far ahead of this process's clock another replica's may
// run: an analysis created less than this after the watermark is replayed
// from the stream instead.
const liveSkew = time.Second

// liveEvent is one event of a tree, as the stream delivered it.
type liveEvent struct {
	seq     uint64
	subject string
	ev      *commonv1.Event
}

// liveTree is the events of one analysis's tree seen so far.
type liveTree struct {
	events   []liveEvent
	seen     time.Time     // when the first event (or the first watch) came
	watchers int           // watches reading it: it is not evicted meanwhile
	wake     chan struct{} // closed and replaced at each event
}

// errLiveLost ends a watch served by liveTrees whose consumer failed.
var errLiveLost = errors.New("analysis: the live events were lost")

func newLiveTrees(bus *events.Bus, keep time.Duration, clock func() time.Time, log *slog.Logger) *liveTrees {
	return &liveTrees{bus: bus, keep: keep, clock: clock, log: log, trees: map[string]*liveTree{}, lost: make(chan struct{})}
}

// liveFilter matches the job events of every analysis, in today's subject
// layout and the one before (see subjects.go), not the oldest one.
const liveFilter = events.EventSubjectPrefix + "*.job.*.*.*"

// treeKey is the key of analysis rootID of tenant in trees.
func treeKey(tenant, rootID string) string {
	return events.SubjectToken(tenant) + "." + events.SubjectToken(rootID)
}

// run follows the events stream from its end until ctx is done, starting
// again a second after a failure, and evicts old trees meanwhile.
func (l *liveTrees) run(ctx context.Context) {
	var evicting sync.WaitGroup
	defer evicting.Wait()
	evicting.Go(func() { every(ctx, max(l.keep/4, 100*time.Millisecond), l.evict) })
	for ctx.Err() == nil {
		err := l.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("the live events of analyses stopped; watches replay from the stream until they start again", slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// follow delivers the stream's job events to trees from the stream's
// last sequence on, until the consumer fails; then it drops every tree.
func (l *liveTrees) follow(ctx context.Context) error {
	last, err := l.bus.LastSequence(ctx, events.StreamEvents)
	if err != nil {
		return err
	}
	l.start()
	err = l.bus.ReplaySubjects(ctx, events.StreamEvents, []string{liveFilter}, last, l.add)
	l.drop()
	return err
}

// drop forgets every tree and ends the watches they served, with
// errLiveLost; serve refuses every tree until start runs again.
func (l *liveTrees) drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running = false
	clear(l.trees)
	l.order = nil
	close(l.lost)
	l.lost = make(chan struct{})
}

// start marks the trees complete from now on.
func (l *liveTrees) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running, l.watermark = true, l.clock()
}

// add appends an event to its tree.
func (l *liveTrees) add(seq uint64, subject string, ev *commonv1.Event) error {
	tok := strings.Split(subject, ".") // am evt <tenant> job <root> <job> <state>
	if len(tok) != 7 {
		return nil
	}
	key := tok[2] + "." + tok[4]
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.treeLocked(key)
	t.events = append(t.events, liveEvent{seq: seq, subject: subject, ev: ev})
	close(t.wake)
	t.wake = make(chan struct{})
	return nil
}

// treeLocked returns the tree of key, new if there is none.
func (l *liveTrees) treeLocked(key string) *liveTree {
	t := l.trees[key]
	if t == nil {
		t = &liveTree{seen: l.clock(), wake: make(chan struct{})}
		l.trees[key] = t
		l.order = append(l.order, key)
	}
	return t
}

// evict drops the trees first seen more than keep ago that no watch is
// reading, and moves the watermark to keep ago.
func (l *liveTrees) evict() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.running {
		return
	}
	cut := l.clock().Add(-l.keep)
	if cut.After(l.watermark) {
		l.watermark = cut
	}
	kept := l.order[:0]
	for i, key := range l.order {
		t := l.trees[key]
		switch {
		case !t.seen.Before(cut):
			kept = append(kept, l.order[i:]...)
			l.order = kept
			return
		case t.watchers > 0:
			kept = append(kept, key)
		default:
			delete(l.trees, key)
		}
	}
	l.order = kept
}

// serve calls fn for every event of root's tree, in stream order, from
// its first and then live, like a replay of treeFilter from the stream's
// start. It returns ok false, having called nothing, if the tree's events
// may be incomplete here. Otherwise it returns fn's error, ctx's, or
// errLiveLost with the sequence of the last event fn was given (0: none),
// after which a replay from the stream goes on.
func (l *liveTrees) serve(ctx context.Context, root *Job, fn func(seq uint64, subject string, ev *commonv1.Event) error) (ok bool, last uint64, err error) {
	l.mu.Lock()
	if !l.running || !root.CreateTime.After(l.watermark.Add(liveSkew)) {
		l.mu.Unlock()
		return false, 0, nil
	}
	t, lost := l.treeLocked(treeKey(root.Tenant, root.ID)), l.lost
	t.watchers++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		t.watchers--
		l.mu.Unlock()
	}()
	for next := 0; ; {
		// Events delivered before a loss are the stream's, in order: they
		// are sent; the loss ends the watch once they are.
		l.mu.Lock()
		pending, wake := t.events[next:], t.wake
		l.mu.Unlock()
		for _, e := range pending {
			if err := fn(e.seq, e.subject, e.ev); err != nil {
				return true, last, err
			}
			last = e.seq
		}
		next += len(pending)
		if len(pending) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return true, last, ctx.Err()
		case <-lost:
			return true, last, errLiveLost
		case <-wake:
		}
	}
}
