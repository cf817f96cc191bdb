package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

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
// Replay uses an ephemeral ordered consumer: it holds no server state once it
// returns, and recovers transparently from gaps and reconnects.
func (b *Bus) Replay(ctx context.Context, stream, subjectFilter string, afterSeq uint64,
	fn func(seq uint64, ev *commonv1.Event) error,
) error {
	if fn == nil {
		return errors.New("events: replay: nil fn")
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if subjectFilter != "" {
		cfg.FilterSubjects = []string{subjectFilter}
	}
	if afterSeq > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = afterSeq + 1
	}
	cons, err := b.js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return fmt.Errorf("events: replay %s: %w", stream, err)
	}
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
		if err := fn(meta.Sequence.Stream, ev); err != nil {
			return err
		}
	}
}
