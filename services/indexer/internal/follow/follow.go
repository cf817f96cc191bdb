// Package follow keeps a replica's local state in step with changes every
// replica publishes: it reads one subject filter of a JetStream stream in
// stream order, from the position recorded beside the state, hands each
// event to an apply function, and records how far it got. The indexer's
// search shards follow the document store's chunk changes with it (see
// package intake).
//
// # Position
//
// The position (the last applied stream sequence, and the stream's
// creation time, which tells a recreated stream from the one the
// position counts in) lives in a file beside the state it describes, on
// the replica's own volume: state and position are lost, kept or restored
// together. It is written at most every SaveInterval while events flow,
// when the follower catches up and when it stops; apply must be idempotent,
// since a crash replays what followed the last save.
//
// At start, and whenever it resumes, the follower compares the position
// with the stream: no position, another stream, or a sequence the stream
// no longer holds (AM_EVENTS keeps events for seven days; a replica down
// longer has missed some) means the state cannot be brought up to date
// from the stream. It then notes the stream's last sequence, rebuilds the
// state from the source of truth (the rebuild function), and follows from
// that sequence: what changed during the rebuild is applied again.
//
// # Consumer
//
// Each replica reads with an ordered consumer of its own: ephemeral, no
// acknowledgements, created from the position, recreated by the client
// from the last sequence it delivered after a gap or a lost server. Being
// ephemeral, it holds nothing on the server once the replica is gone (the
// server drops it after InactiveThreshold), so consumers of replicas that
// were scaled away do not pile up; the durable part is the position file.
// The consumer's name starts with the replica's name, for `nats consumer
// ls`.
//
// # Health
//
// Until the follower has applied every event the stream held when it
// (re)started, and while it rebuilds, it reports an error to the health
// function (the indexer's "search_index" dependency: NOT_SERVING, so a
// load balancer keeps searches away from a replica that would miss
// documents); then nil.
package follow

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Defaults of Config.
const (
	// DefaultSaveInterval bounds what a crash makes a follower apply again.
	DefaultSaveInterval = time.Second
	// InactiveThreshold is how long the server keeps a follower's consumer
	// once nobody reads it: the replica is gone (a running consumer always
	// has a pull pending).
	InactiveThreshold = 2 * time.Minute
	// retryMin and retryMax bound the wait before applying an event again,
	// or resuming after the stream failed.
	retryMin, retryMax = 100 * time.Millisecond, 5 * time.Second
)

// Errors reported to Config.Health.
var (
	// ErrCatchingUp means the follower has not yet applied every event the
	// stream held when it started.
	ErrCatchingUp = errors.New("follow: catching up with the stream")
	// ErrRebuilding means the follower rebuilds its state: the stream no
	// longer holds what followed its position.
	ErrRebuilding = errors.New("follow: rebuilding from the source of truth")
)

// Config configures a Follower.
type Config struct {
	// Stream is the stream to follow, e.g. events.StreamEvents.
	Stream string
	// Subject is the subject filter of the events to apply.
	Subject string
	// Position is the file holding the position.
	Position string
	// Name names the replica; it prefixes the consumer's name.
	Name string
	// Apply applies one event; an error makes the follower apply it again
	// after a back-off (never skip it), unless it is events.Permanent:
	// then the event is logged and skipped. It is called from one
	// goroutine, in stream order.
	Apply func(ctx context.Context, ev *commonv1.Event) error
	// Rebuild rebuilds the state from the source of truth. It runs
	// between applies, never concurrently with Apply.
	Rebuild func(ctx context.Context) error
	// Health receives ErrCatchingUp or ErrRebuilding, and nil once caught
	// up; nil discards them.
	Health func(err error)
	// SaveInterval is how often the position is written while events
	// flow; 0 means DefaultSaveInterval.
	SaveInterval time.Duration
	// Logger receives progress and errors; nil discards them.
	Logger *slog.Logger
}

// position is the content of the position file.
type position struct {
	Stream  string    `json:"stream"`
	Subject string    `json:"subject"`
	Created time.Time `json:"stream_created"`
	Seq     uint64    `json:"seq"`
}

// Stats describe a follower's progress.
type Stats struct {
	// Position is the last applied stream sequence.
	Position uint64
	// Applied counts the events applied (or skipped as permanent
	// failures) since Run started.
	Applied int64
	// Rebuilds counts the rebuilds since Run started.
	Rebuilds int64
	// CaughtUp is true once every event the stream held at the start was
	// applied.
	CaughtUp bool
}

// Follower follows one subject filter of a stream. Run it once.
type Follower struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger

	caughtUp chan struct{} // closed on the first catch-up

	mu    sync.Mutex // guards the fields below
	pos   *position  // nil: none recorded
	stats Stats
	saved time.Time // when pos was last written
}

// New returns a follower reading through bus; it reads the position file
// and reports ErrCatchingUp to cfg.Health, so the replica is not ready
// before Run has caught up.
func New(bus *events.Bus, cfg Config) (*Follower, error) {
	if cfg.Stream == "" || cfg.Subject == "" || cfg.Position == "" || cfg.Apply == nil || cfg.Rebuild == nil {
		return nil, errors.New("follow: a stream, a subject, a position file, Apply and Rebuild are required")
	}
	if cfg.SaveInterval <= 0 {
		cfg.SaveInterval = DefaultSaveInterval
	}
	if cfg.Health == nil {
		cfg.Health = func(error) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &Follower{js: bus.JetStream(), cfg: cfg, log: log.With(slog.String("component", "follow"), slog.String("subject", cfg.Subject)),
		caughtUp: make(chan struct{})}
	pos, err := readPosition(cfg.Position)
	if err != nil {
		return nil, err
	}
	if pos != nil && (pos.Stream != cfg.Stream || pos.Subject != cfg.Subject) {
		pos = nil // another stream's count
	}
	f.pos = pos
	if pos != nil {
		f.stats.Position = pos.Seq
	}
	cfg.Health(ErrCatchingUp)
	return f, nil
}

// CaughtUp returns a channel closed once the follower has caught up for
// the first time.
func (f *Follower) CaughtUp() <-chan struct{} { return f.caughtUp }

// Stats returns the follower's progress.
func (f *Follower) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Run follows the stream until ctx is done, then writes the position and
// returns nil. Failures of the stream are logged and retried.
func (f *Follower) Run(ctx context.Context) error {
	wait := retryMin
	for {
		err := f.session(ctx)
		if ctx.Err() != nil {
			if err := f.save(); err != nil {
				f.log.Warn("position not saved; the next start applies again what followed the last save", slog.Any("error", err))
			}
			return nil
		}
		f.log.Warn("following the stream failed; resuming", slog.Any("error", err), slog.Duration("after", wait))
		sleep(ctx, wait)
		wait = min(2*wait, retryMax)
	}
}

// session resumes from the position, rebuilding first if the stream no
// longer holds what followed it, and applies events until the stream
// fails or ctx is done.
func (f *Follower) session(ctx context.Context) error {
	stream, err := f.js.Stream(ctx, f.cfg.Stream)
	if err != nil {
		return fmt.Errorf("follow: stream %s: %w", f.cfg.Stream, err)
	}
	info := stream.CachedInfo()
	if why := f.gap(info); why != "" {
		if err := f.rebuild(ctx, info, why); err != nil {
			return err
		}
	}
	f.mu.Lock()
	start := f.pos.Seq + 1
	f.mu.Unlock()
	cons, err := f.js.OrderedConsumer(ctx, f.cfg.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.cfg.Subject}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: start,
		InactiveThreshold: InactiveThreshold, NamePrefix: consumerName(f.cfg.Name),
	})
	if err != nil {
		return fmt.Errorf("follow: consumer: %w", err)
	}
	iter, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow: consumer: %w", err)
	}
	defer func() {
		iter.Stop()
		// Leave nothing on the server; what a crash leaves, the server
		// drops after InactiveThreshold.
		if ci := cons.CachedInfo(); ci != nil {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			_ = f.js.DeleteConsumer(dctx, f.cfg.Stream, ci.Name)
			cancel()
		}
	}()
	// Behind until the events the stream held at the start are applied:
	// a replica under a steady flow of changes may never see none left.
	behind, pending, applied := true, uint64(0), uint64(0)
	if ci := cons.CachedInfo(); ci != nil {
		pending = ci.NumPending
	}
	if pending == 0 {
		f.reachedEnd()
		behind = false
	}
	for {
		msg, err := iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			return fmt.Errorf("follow: next event: %w", err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("follow: event metadata: %w", err)
		}
		if err := f.apply(ctx, msg.Data(), meta.Sequence.Stream); err != nil {
			return err // ctx is done
		}
		f.mu.Lock()
		f.pos.Seq = meta.Sequence.Stream
		f.stats.Position = meta.Sequence.Stream
		f.stats.Applied++
		due := time.Since(f.saved) >= f.cfg.SaveInterval
		f.mu.Unlock()
		applied++
		if behind && (meta.NumPending == 0 || applied >= pending) {
			f.reachedEnd()
			behind = false
		} else if due {
			if err := f.save(); err != nil {
				f.log.Warn("position not saved", slog.Any("error", err))
			}
		}
	}
}

// gap returns why the stream cannot bring the state up to date from the
// position, or "" if it can.
func (f *Follower) gap(info *jetstream.StreamInfo) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch p := f.pos; {
	case p == nil:
		return "no position recorded"
	case !p.Created.Equal(info.Created):
		return "the stream was created again"
	case p.Seq > info.State.LastSeq:
		return fmt.Sprintf("position %d is past the stream's last sequence %d", p.Seq, info.State.LastSeq)
	case p.Seq+1 < info.State.FirstSeq:
		return fmt.Sprintf("the stream no longer holds sequences %d to %d", p.Seq+1, info.State.FirstSeq-1)
	}
	return ""
}

// rebuild rebuilds the state and moves the position to the stream's last
// sequence before the rebuild began.
func (f *Follower) rebuild(ctx context.Context, info *jetstream.StreamInfo, why string) error {
	f.cfg.Health(ErrRebuilding)
	f.log.Info("rebuilding: the stream cannot bring the state up to date", slog.String("reason", why),
		slog.Uint64("stream_first_seq", info.State.FirstSeq), slog.Uint64("stream_last_seq", info.State.LastSeq))
	began := time.Now()
	// Whatever the stream stores after this, the rebuild may have missed.
	last := info.State.LastSeq
	if err := f.cfg.Rebuild(ctx); err != nil {
		return fmt.Errorf("follow: rebuild: %w", err)
	}
	f.mu.Lock()
	f.pos = &position{Stream: f.cfg.Stream, Subject: f.cfg.Subject, Created: info.Created, Seq: last}
	f.stats.Position = last
	f.stats.Rebuilds++
	caughtUp := f.stats.CaughtUp
	f.mu.Unlock()
	if caughtUp {
		f.cfg.Health(ErrCatchingUp) // until the rebuild's own events are applied
	}
	f.log.Info("rebuilt", slog.Duration("took", time.Since(began)), slog.Uint64("position", last))
	return f.save()
}

// apply applies one event, again after a back-off until it succeeds; it
// returns only ctx's error.
func (f *Follower) apply(ctx context.Context, data []byte, seq uint64) error {
	var ev commonv1.Event
	if err := proto.Unmarshal(data, &ev); err != nil {
		f.log.Warn("skipped an undecodable event", slog.Uint64("seq", seq), slog.Any("error", err))
		return nil
	}
	wait := retryMin
	for {
		err := f.cfg.Apply(ctx, &ev)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case events.IsPermanent(err):
			f.log.Error("skipped an event that cannot be applied", slog.Uint64("seq", seq), slog.String("event_id", ev.GetId()), slog.Any("error", err))
			return nil
		}
		f.log.Warn("applying an event failed; retrying", slog.Uint64("seq", seq), slog.String("event_id", ev.GetId()),
			slog.Any("error", err), slog.Duration("after", wait))
		if !sleep(ctx, wait) {
			return ctx.Err()
		}
		wait = min(2*wait, retryMax)
	}
}

// reachedEnd marks the follower caught up and saves the position.
func (f *Follower) reachedEnd() {
	f.mu.Lock()
	first := !f.stats.CaughtUp
	wasRebuilt := f.stats.Rebuilds
	f.stats.CaughtUp = true
	pos := f.stats.Position
	f.mu.Unlock()
	f.cfg.Health(nil)
	if first {
		close(f.caughtUp)
		f.log.Info("caught up with the stream", slog.Uint64("position", pos), slog.Int64("rebuilds", wasRebuilt))
	}
	if err := f.save(); err != nil {
		f.log.Warn("position not saved", slog.Any("error", err))
	}
}

// save writes the position file (a temporary file, synced, renamed).
func (f *Follower) save() error {
	f.mu.Lock()
	if f.pos == nil {
		f.mu.Unlock()
		return nil
	}
	p := *f.pos
	f.saved = time.Now()
	f.mu.Unlock()
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	tmp := f.cfg.Position + ".tmp"
	if err := os.MkdirAll(filepath.Dir(tmp), 0o750); err != nil {
		return fmt.Errorf("follow: save position: %w", err)
	}
	fh, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("follow: save position: %w", err)
	}
	_, werr := fh.Write(data)
	serr := fh.Sync()
	if err := errors.Join(werr, serr, fh.Close()); err != nil {
		return fmt.Errorf("follow: save position: %w", err)
	}
	if err := os.Rename(tmp, f.cfg.Position); err != nil {
		return fmt.Errorf("follow: save position: %w", err)
	}
	return nil
}

// readPosition reads a position file; none is nil.
func readPosition(path string) (*position, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("follow: read position: %w", err)
	}
	var p position
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, nil // unreadable: as if none, which rebuilds
	}
	return &p, nil
}

// consumerName returns a consumer name prefix naming the replica, unique
// to this process (a restarted replica must not meet the consumer its
// previous process left), without the characters consumer names cannot
// hold ('.', '*', '>', path separators, white space).
func consumerName(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r == '/' || r == '\\' || r <= ' ':
			return '_'
		}
		return r
	}, fmt.Sprintf("follow-%s-%x", name, b))
}

// sleep waits d, or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
