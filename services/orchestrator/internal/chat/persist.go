package chat

import (
	"context"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/conversation"
)

// persistTimeout bounds one batch write. Writes outlive the client's
// context (a cancelled turn still stores its partial answer), so they need
// a bound of their own.
const persistTimeout = 15 * time.Second

// persister stores a turn's messages in order, off the loop's critical
// path: add queues messages and returns at once; one goroutine writes
// whatever is queued as one Append (one round trip), so storage latency
// overlaps with the next model call instead of adding to it. flush waits
// until everything queued is stored. After a failed write nothing more is
// written (later sequence numbers would leave a gap) and every flush
// reports the failure.
type persister struct {
	store conversation.Store
	scope conversation.Scope
	id    string
	ctx   context.Context
	reqs  chan persistReq
	done  chan struct{}
}

type persistReq struct {
	msgs  []conversation.Message
	flush chan error // nil for an add
}

func newPersister(ctx context.Context, store conversation.Store, scope conversation.Scope, id string) *persister {
	p := &persister{
		store: store, scope: scope, id: id,
		ctx:  context.WithoutCancel(ctx),
		reqs: make(chan persistReq, 64),
		done: make(chan struct{}),
	}
	go p.run()
	return p
}

// add queues msgs for writing.
func (p *persister) add(msgs ...conversation.Message) {
	p.reqs <- persistReq{msgs: msgs}
}

// flush waits until every message queued before it is written, and returns
// the first write error of the turn.
func (p *persister) flush() error {
	ch := make(chan error, 1)
	p.reqs <- persistReq{flush: ch}
	return <-ch
}

// close stops the writer after the queue drains. No add or flush may follow.
func (p *persister) close() {
	close(p.reqs)
	<-p.done
}

func (p *persister) run() {
	defer close(p.done)
	var failed error
	for r := range p.reqs {
		batch := r.msgs
		flushes := []chan error(nil)
		if r.flush != nil {
			flushes = append(flushes, r.flush)
		}
		// Take whatever else is queued into the same write.
	drain:
		for {
			select {
			case more, ok := <-p.reqs:
				if !ok {
					break drain
				}
				batch = append(batch, more.msgs...)
				if more.flush != nil {
					flushes = append(flushes, more.flush)
				}
			default:
				break drain
			}
		}
		if failed == nil && len(batch) > 0 {
			ctx, cancel := context.WithTimeout(p.ctx, persistTimeout)
			failed = p.store.Append(ctx, p.scope, p.id, batch...)
			cancel()
		}
		for _, f := range flushes {
			f <- failed
		}
	}
}
