// Package events is the mesh's single way to publish and consume domain
// events and work items on NATS JetStream, and to keep them consistent with
// the state they describe.
//
// # Subjects and streams
//
// Domain events travel on am.evt.<tenant>.<domain>.<entity>.<event>
// (see [EventSubject]) and are kept in the AM_EVENTS stream for seven days;
// work items travel on am.work.<queue> ([WorkSubject]) in the AM_WORK work
// queue stream; messages a consumer gives up on are copied to
// am.dlq.<original subject> ([DeadLetterSubject]) in AM_DLQ for thirty days.
// [Bus.EnsureStreams] provisions all three idempotently.
//
// Every message is a protobuf-encoded [commonv1.Event] envelope. Its id is
// also the JetStream Nats-Msg-Id, so publishing the same event twice inside
// the streams' two-minute duplicate window stores it once. W3C trace context
// travels in the message headers.
//
// # Consistency: state and events never diverge
//
// FerretDB v1, our embedded database, has no multi-document transactions and
// no change streams, so the mesh uses a per-document transactional outbox:
//
//  1. A domain store writes a state change and the events it implies in ONE
//     single-document update: the update's $set changes the state and its
//     $push appends [OutboxEntry] values (built with [OutboxEntryFor]) to the
//     document's "outbox" array, using [OutboxPush]. A single-document write
//     is atomic on both FerretDB and MongoDB, so either both the state and
//     its events are stored or neither is.
//  2. A [Relay] per collection publishes pending outbox entries in order and
//     then removes them with a second update ($pullAll of the exact elements
//     it read: FerretDB v1 ignores $pull with a condition). A crash between
//     the publish and the removal makes the relay publish the entry again on
//     restart, so delivery is at least once. By default it relays one
//     document after the other; with [Relay.SetConcurrency] it relays several
//     at once and removes published entries without holding up publishing,
//     and a store that is the only writer of its documents can hand it the
//     entries it wrote ([Relay.NotifyEntries]) instead of having them read
//     back, and tell it which documents it deleted ([Relay.SetGone]), whose
//     entries went with them: no removal is written to those.
//  3. The relay publishes each entry with Nats-Msg-Id set to the event id, so
//     a re-publish inside the duplicate window is stored once; consumers are
//     idempotent (keyed by event id or by the state they converge to), so a
//     redelivery outside it is harmless. Together that is effectively once.
//
// Services that have no state to write (a pure notification) may call
// [Bus.Publish] directly; it retries transient failures and is itself
// deduplicated by event id.
//
// # Consuming
//
// [Bus.Consume] runs a durable pull consumer with explicit acks: a handler's
// nil result acks the message, an error redelivers it after a backoff, and
// after the last allowed delivery (or at once for an error wrapped with
// [Permanent]) the message is copied to the dead-letter stream and
// terminated. [Bus.Replay] reads a stream from a sequence onwards and then
// follows it live; the gateway uses it to resume SSE streams from
// Last-Event-ID.
package events
