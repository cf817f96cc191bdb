package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// Replay reads stream in order, starting after sequence afterSeq (0 means
// from the beginning), and calls fn for each event whose subject matches
// subjectFilter (empty means every subject). After the stored messages it
// keeps following the stream live.
//
// Replay blocks until ctx is done or fn returns an error, and returns that
// error, or ctx.Err(). fn is called from one goroutine, in stream order; seq
// is the message's stream sequence, which the gateway uses as the SSE event
// id. Messages that are not decodable events are logged and skipped.
//
// Replay uses an ephemeral ordered consumer, which recovers transparently
// from gaps and reconnects, and deletes it when it returns: the server keeps
// at most 1,000 consumers per stream by default, and an ordered consumer left
// to expire stays for replayInactive, so watches and resumed streams would
// otherwise use up the stream's consumers at a few per second. A process that
// dies without deleting its consumer leaves it for replayInactive.
// replayInactive is how long the server keeps a replay's consumer that no
// one pulls from: long enough to ride out a client's reconnect, short enough
// that consumers of crashed processes do not pile up.
const replayInactive = 30 * time.Second

func (b *Bus) Replay(ctx context.Context, stream, subjectFilter string, afterSeq uint64,
	fn func(seq uint64, ev *commonv1.Event) error,
) error {
	var filters []string
	if subjectFilter != "" {
		filters = []string{subjectFilter}
	}
	return b.ReplaySubjects(ctx, stream, filters, afterSeq, func(seq uint64, _ string, ev *commonv1.Event) error {
		return fn(seq, ev)
	})
}

// ReplaySubjects is Replay of the events whose subject matches any of
// filters (none: every subject), fn hearing each event's subject too. The
// filters must not overlap: the server refuses a consumer whose filters
// match a subject twice.
func (b *Bus) ReplaySubjects(ctx context.Context, stream string, filters []string, afterSeq uint64,
	fn func(seq uint64, subject string, ev *commonv1.Event) error,
) error {
	if fn == nil {
		return errors.New("events: replay: nil fn")
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy, InactiveThreshold: replayInactive}
	if len(filters) > 0 {
		cfg.FilterSubjects = filters
	}
	if afterSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = afterSeq + 1
	}
	cons, err := b.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("events: replay %s: %w", stream, err)
	}
	defer b.deleteReplayConsumer(stream, cons)
	iter, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("events: replay %s: %w", stream, err)
	}
	defer iter.Stop()

	for {
		msg, err := iter.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("events: replay %s: %w", stream, err)
		}
		meta, err := msg.Metadata()
		if err != nil {
			return fmt.Errorf("events: replay %s: %w", stream, err)
		}
		ev, err := decodeEvent(msg.Data())
		if err != nil {
			b.logger.Warn("replay skipped undecodable message", slog.String("stream", stream),
				slog.String("subject", msg.Subject()), slog.Uint64("seq", meta.Sequence.Stream), slog.Any("error", err))
			continue
		}
		if err := fn(meta.Sequence.Stream, msg.Subject(), ev); err != nil {
			return err
		}
	}
}

// deleteReplayConsumer removes the server's consumer of a finished replay.
// It runs after the replay's context may have ended, so it has its own
// short deadline; a failure only leaves the consumer to expire.
func (b *Bus) deleteReplayConsumer(stream string, cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil || info.Name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := b.js.DeleteConsumer(ctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		b.logger.Debug("replay consumer left to expire", slog.String("stream", stream),
			slog.String("consumer", info.Name), slog.Any("error", err))
	}
}

// LastSequence is the sequence of the newest message of stream: no client
// of a watch that replays stream can hold an event id beyond it, so a
// resume from one is a malformed request, not a wait for events.
func (b *Bus) LastSequence(ctx context.Context, stream string) (uint64, error) {
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("events: stream %s: %w", stream, err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// EventAt returns the event stream holds at sequence seq, or nil when it
// holds none there (never did, or has let it go): a watch resumed after
// seq checks with it that seq is an event of what it watches, since the
// stream's sequences count every tenant's events and another watch's id
// would otherwise skip this one's events before it.
func EventAt(ctx context.Context, stream jetstream.Stream, seq uint64) (*commonv1.Event, error) {
	msg, err := stream.GetMsg(ctx, seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("events: message %d: %w", seq, err)
	}
	ev, err := decodeEvent(msg.Data)
	if err != nil {
		return nil, nil // not an event: of no watch
	}
	return ev, nil
}
