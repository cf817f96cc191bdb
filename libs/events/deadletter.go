package events

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Headers added to a dead-lettered message. The original headers are kept,
// except JetStream's own Nats-* headers.
const (
	// HeaderDLQReason says why the message was dead-lettered.
	HeaderDLQReason = "Am-Dlq-Reason"
	// HeaderDLQStream is the stream the message was consumed from.
	HeaderDLQStream = "Am-Dlq-Stream"
	// HeaderDLQSequence is the message's sequence in that stream.
	HeaderDLQSequence = "Am-Dlq-Sequence"
	// HeaderDLQDeliveries is how many times the message had been delivered.
	HeaderDLQDeliveries = "Am-Dlq-Deliveries"
	// HeaderDLQConsumer is the durable consumer that gave up.
	HeaderDLQConsumer = "Am-Dlq-Consumer"
	// HeaderDLQSubject is the subject the message was published on.
	HeaderDLQSubject = "Am-Dlq-Subject"
	// HeaderDLQMsgID is the message's original Nats-Msg-Id (the event id).
	HeaderDLQMsgID = "Am-Dlq-Msg-Id"
)

// maxReasonLen caps the reason header.
const maxReasonLen = 1024

// deadLetter copies msg to the dead-letter stream and terminates it. If the
// copy cannot be stored, msg is redelivered later instead, so it is never
// lost.
func (c *Consumer) deadLetter(msg jetstream.Msg, meta *jetstream.MsgMetadata, log *slog.Logger, reason string) {
	reason = headerValue(reason)
	h := nats.Header{}
	for k, vs := range msg.Headers() {
		if strings.HasPrefix(k, "Nats-") {
			continue
		}
		h[k] = slices.Clone(vs)
	}
	if id := msg.Headers().Get(HeaderMsgID); id != "" {
		h.Set(HeaderDLQMsgID, id)
	}
	h.Set(HeaderDLQReason, reason)
	h.Set(HeaderDLQStream, meta.Stream)
	h.Set(HeaderDLQSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	h.Set(HeaderDLQDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	h.Set(HeaderDLQConsumer, meta.Consumer)
	h.Set(HeaderDLQSubject, msg.Subject())
	// Stable per (stream, consumer, message): a retried dead-lettering is
	// stored once, while two consumers giving up on one message both are.
	h.Set(HeaderMsgID, fmt.Sprintf("dlq:%s:%s:%d", meta.Stream, meta.Consumer, meta.Sequence.Stream))

	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), ackTimeout)
	defer cancel()
	dlq := &nats.Msg{Subject: DeadLetterSubject(msg.Subject()), Data: msg.Data(), Header: h}
	if _, err := c.bus.publishMsg(ctx, dlq); err != nil {
		delay := c.spec.Backoff[len(c.spec.Backoff)-1]
		log.Error("dead-lettering failed; redelivering", slog.String("reason", reason),
			slog.Duration("delay", delay), slog.Any("error", err))
		_ = msg.NakWithDelay(delay)
		return
	}
	c.deadLettered(ctx)
	log.Error("message dead-lettered", slog.String("reason", reason), slog.String("dlq_subject", dlq.Subject))
	if err := msg.TermWithReason(reason); err != nil {
		log.Warn("term failed; message may be redelivered and dead-lettered again", slog.Any("error", err))
	}
}

// headerValue makes s safe as a NATS header value: one line, bounded length.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxReasonLen {
		s = utf8x.Prefix(s, maxReasonLen) + "…"
	}
	return s
}
