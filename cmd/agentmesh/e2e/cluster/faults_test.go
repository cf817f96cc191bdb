//go:build e2ecluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fault is one injected fault and what it took to recover from it.
type fault struct {
	what   string    // e.g. "kill -9 orchestrator-b"
	during string    // the flow step it landed in
	at     time.Time // when it was injected
	// kind is what the fault took away: "service" (a replica), "nats" (a
	// node), "mongo" (the database).
	kind   string
	target string // the replica, node or "ferretdb"
	// down is how long the target was gone; recovery how long it then took
	// until it served again (a restarted replica's start, a NATS node
	// catching up, the services' health after the database came back).
	down, recovery time.Duration
	notes          []string
}

func (f *fault) note(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// syncList is a list appended to from several goroutines.
type syncList[T any] struct {
	mu  sync.Mutex // guards all
	all []T
}

func (l *syncList[T]) add(v T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, v)
}

// list returns a copy of the list.
func (l *syncList[T]) list() []T {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]T(nil), l.all...)
}

// restartDelay is how long a killed process stays down before it is
// started again, as a kubelet or an operator would.
const restartDelay = 2 * time.Second

// killReplica kills r with SIGKILL, checks that the service's other
// replicas keep serving, starts r again after restartDelay and waits until
// it serves.
func (c *cluster) killReplica(r *replica, during string) *fault {
	c.t.Helper()
	f := &fault{what: "kill -9 " + r.name, during: during, kind: "service", target: r.name, at: time.Now()}
	c.faults.add(f)
	r.kill()
	for _, o := range c.replicas[r.svc] {
		if o != r {
			f.note("%s %s right after the kill", o.name, c.health(o, ""))
		}
	}
	time.Sleep(restartDelay)
	f.down = time.Since(f.at)
	if err := r.start(); err != nil {
		c.t.Fatal(err)
	}
	f.recovery = c.waitServing(r, 90*time.Second)
	return f
}

// waitExecution waits for the next execution of kind whose key holds
// marker, still under way; nil after timeout.
func (c *cluster) waitExecution(kind, marker string, timeout time.Duration) *execution {
	deadline := time.After(timeout)
	for {
		select {
		case e := <-c.rec.next(kind):
			if strings.Contains(e.key, marker) && !isClosed(e.done) {
				return e
			}
		case <-deadline:
			return nil
		}
	}
}

// streamInfo is stream's state, replicas included.
func (c *cluster) streamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	js, closeNATS, err := c.jetStream()
	if err != nil {
		return nil, err
	}
	defer closeNATS()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// streamsCurrent reports whether every stream has a leader and all its
// replicas current.
func (c *cluster) streamsCurrent() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, name := range eventsStreams {
		info, err := c.streamInfo(ctx, name)
		if err != nil {
			return false, fmt.Sprintf("%s: %v", name, err)
		}
		cl := info.Cluster
		if cl == nil || cl.Leader == "" || len(cl.Replicas) != 2 {
			return false, fmt.Sprintf("%s: cluster %+v", name, cl)
		}
		for _, p := range cl.Replicas {
			if !p.Current || p.Offline {
				return false, fmt.Sprintf("%s: replica %s not current", name, p.Name)
			}
		}
	}
	return true, ""
}

// killNATSNode kills the node leading the events stream, keeps it down
// for down, watches the services' health meanwhile, restarts it on its
// store and waits until every stream is fully replicated again.
func (c *cluster) killNATSNode(down time.Duration) *fault {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	info, err := c.streamInfo(ctx, eventsStreams[0])
	cancel()
	if err != nil || info.Cluster == nil {
		c.t.Fatalf("events stream info: %v", err)
	}
	var node *proc
	for _, n := range c.nats {
		if n.name == info.Cluster.Leader {
			node = n
		}
	}
	if node == nil {
		c.t.Fatalf("no node named %q leads %s", info.Cluster.Leader, eventsStreams[0])
	}
	f := &fault{what: "kill -9 " + node.name + " (leader of " + eventsStreams[0] + ")", during: "all flows under way", kind: "nats", target: node.name, at: time.Now()}
	c.faults.add(f)
	node.kill()
	notServing := c.watchHealth(down, nil)
	for name, d := range notServing {
		f.note("%s not SERVING for %v while the node was down", name, d.Round(10*time.Millisecond))
	}
	if len(notServing) == 0 {
		f.note("every service stayed SERVING (clients moved to the other nodes)")
	}
	f.down = time.Since(f.at)
	if err := node.start(); err != nil {
		c.t.Fatal(err)
	}
	restarted := time.Now()
	for {
		ok, why := c.streamsCurrent()
		if ok {
			break
		}
		if time.Since(restarted) > 90*time.Second {
			c.t.Fatalf("streams not fully replicated 90s after %s restarted: %s", node.name, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.recovery = time.Since(restarted)
	return f
}

// watchHealth polls every replica's overall and liveness health for d,
// and returns how long each replica was seen not SERVING; onPoll, if set,
// sees every poll's statuses.
func (c *cluster) watchHealth(d time.Duration, onPoll func(r *replica, overall, liveness string)) map[string]time.Duration {
	out := map[string]time.Duration{}
	end := time.Now().Add(d)
	const every = 250 * time.Millisecond
	for time.Now().Before(end) {
		for _, rs := range c.replicas {
			for _, r := range rs {
				overall := c.health(r, "")
				liveness := ""
				if r.svc != "gateway" {
					liveness = c.health(r, "liveness")
				}
				if overall != "SERVING" {
					out[r.name] += every
				}
				if onPoll != nil {
					onPoll(r, overall, liveness)
				}
			}
		}
		time.Sleep(every)
	}
	return out
}

// restartMongo kills the database process, keeps it down for down while
// checking that every service depending on it reports NOT_SERVING (and
// stays alive: liveness SERVING, same process), starts it again on the
// same data and measures each replica's way back to SERVING.
func (c *cluster) restartMongo(down time.Duration) (*fault, map[string]mongoOutage) {
	c.t.Helper()
	pids := map[string]int{}
	for _, rs := range c.replicas {
		for _, r := range rs {
			pids[r.name] = r.pid()
		}
	}
	f := &fault{what: "kill -9 ferretdb, restarted on the same data", during: "all flows under way", kind: "mongo", target: "ferretdb", at: time.Now()}
	c.faults.add(f)
	c.mongo.kill()
	outages := map[string]mongoOutage{}
	c.watchHealth(down, func(r *replica, overall, liveness string) {
		o := outages[r.name]
		if overall == "NOT_SERVING" && o.notServingAfter == 0 {
			o.notServingAfter = time.Since(f.at)
		}
		if liveness != "" && liveness != "SERVING" {
			o.livenessLost = true
		}
		outages[r.name] = o
	})
	f.down = time.Since(f.at)
	if err := c.mongo.start(); err != nil {
		c.t.Fatal(err)
	}
	restarted := time.Now()
	c.waitMongo(30 * time.Second)
	pending := map[*replica]bool{}
	for _, rs := range c.replicas {
		for _, r := range rs {
			pending[r] = true
		}
	}
	for len(pending) > 0 {
		for r := range pending {
			if c.health(r, "") == "SERVING" {
				o := outages[r.name]
				o.servingAfterRestart = time.Since(restarted)
				o.restarted = r.pid() != pids[r.name]
				outages[r.name] = o
				delete(pending, r)
			}
		}
		if time.Since(restarted) > 90*time.Second {
			var names []string
			for r := range pending {
				names = append(names, r.name)
			}
			c.t.Fatalf("not SERVING 90s after the database came back: %v", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, o := range outages {
		f.recovery = max(f.recovery, o.servingAfterRestart)
	}
	return f, outages
}

// mongoOutage is what one replica did around the database restart.
type mongoOutage struct {
	notServingAfter     time.Duration // from the kill to the first NOT_SERVING seen; 0 = never
	livenessLost        bool          // liveness was seen not SERVING
	servingAfterRestart time.Duration // from the database's restart to SERVING
	restarted           bool          // the process changed: it was restarted
}
