package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/outage"
)

// Stream names provisioned by [Bus.EnsureStreams].
const (
	// StreamEvents holds domain events (am.evt.>) for [EventsMaxAge].
	StreamEvents = "AM_EVENTS"
	// StreamWork is the work queue stream (am.work.>): a message is removed
	// once a consumer acknowledges it.
	StreamWork = "AM_WORK"
	// StreamDeadLetter holds messages consumers gave up on (am.dlq.>) for
	// [DeadLetterMaxAge].
	StreamDeadLetter = "AM_DLQ"
)

// Subject prefixes of the three streams.
const (
	// EventSubjectPrefix prefixes every domain event subject.
	EventSubjectPrefix = "am.evt."
	// WorkSubjectPrefix prefixes every work queue subject.
	WorkSubjectPrefix = "am.work."
	// DeadLetterSubjectPrefix prefixes every dead-letter subject.
	DeadLetterSubjectPrefix = "am.dlq."
)

// Retention settings of the streams.
const (
	// DuplicateWindow is how long AM_EVENTS, AM_WORK and AM_DLQ remember
	// Nats-Msg-Id values: a message re-published with the same id inside it
	// is stored once.
	DuplicateWindow = 2 * time.Minute
	// EventsMaxAge is how long AM_EVENTS keeps an event.
	EventsMaxAge = 7 * 24 * time.Hour
	// DeadLetterMaxAge is how long AM_DLQ keeps a dead letter.
	DeadLetterMaxAge = 30 * 24 * time.Hour
)

// StreamConfigs returns the configuration of the mesh's three streams, as
// [Bus.EnsureStreams] applies it, with replicas copies of each (1 on one
// server, 3 on a three-node cluster). All use file storage.
func StreamConfigs(replicas int) []jetstream.StreamConfig {
	cfgs := []jetstream.StreamConfig{
		{
			Name:        StreamEvents,
			Description: "agentmesh domain events",
			Subjects:    []string{EventSubjectPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  DuplicateWindow,
			MaxAge:      EventsMaxAge,
			Discard:     jetstream.DiscardOld,
		},
		{
			Name:        StreamWork,
			Description: "agentmesh work queues",
			Subjects:    []string{WorkSubjectPrefix + ">"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  DuplicateWindow,
			Discard:     jetstream.DiscardOld,
		},
		{
			Name:        StreamDeadLetter,
			Description: "agentmesh dead letters",
			Subjects:    []string{DeadLetterSubjectPrefix + ">"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Duplicates:  DuplicateWindow,
			MaxAge:      DeadLetterMaxAge,
			Discard:     jetstream.DiscardOld,
		},
	}
	for i := range cfgs {
		cfgs[i].Replicas = max(replicas, 1)
	}
	return cfgs
}

// EnsureStreams creates the AM_EVENTS, AM_WORK and AM_DLQ streams with one
// replica, or updates them to [StreamConfigs] if they exist; see
// EnsureStreamsReplicated.
func (b *Bus) EnsureStreams(ctx context.Context) error { return b.EnsureStreamsReplicated(ctx, 1) }

// EnsureStreamsReplicated creates the mesh's streams with at least replicas
// copies each, or updates them to [StreamConfigs] if they exist, never to
// fewer replicas than they have: services configured for fewer do not
// shrink what an operator (or another service) scaled up, and reads the
// event-id key ([Bus.EventIDs]), creating it if no service has. It is idempotent
// and safe to call from every service at start-up.
//
// A cluster that cannot place the streams yet is waited for: on a fresh
// cluster the JetStream meta leader is still being elected (a JetStream API
// request then goes unanswered until its context ends) and peers are still
// joining. So each attempt's requests get [EnsureAttemptTimeout], and a
// failed attempt that says the cluster is not ready (no answer, no
// responders, JetStream unavailable or without a leader, no suitable peers
// for placement) is logged and retried with backoff until ctx ends; then the
// last attempt's error is returned. A cluster with fewer servers than
// replicas therefore keeps the caller waiting, logging why. Any other
// failure is returned at once, for example an existing stream that cannot
// be updated in place (its retention policy differs).
func (b *Bus) EnsureStreamsReplicated(ctx context.Context, replicas int) error {
	wait := ensureBackoffMin
	for attempt := 1; ; attempt++ {
		err := b.ensureStreams(ctx, replicas)
		if err == nil {
			// The event-id key, read now so that a watch never waits for it.
			actx, cancel := context.WithTimeout(ctx, EnsureAttemptTimeout)
			_, err = b.EventIDs(actx)
			cancel()
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !clusterNotReady(err) {
			return err
		}
		b.logger.Warn("jetstream not ready for the streams; retrying",
			slog.Int("attempt", attempt), slog.Duration("wait", wait), slog.Any("error", err))
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait + rand.N(wait/2)):
		}
		wait = min(2*wait, ensureBackoffMax)
	}
}

// Retry tuning of EnsureStreamsReplicated.
const (
	// EnsureAttemptTimeout bounds each JetStream API request of an
	// attempt: long enough for a replicated stream to be created on a
	// loaded cluster, short enough to ask again soon after a leader is
	// elected. A create that completes after its request timed out is
	// found by the next attempt, which then updates nothing.
	EnsureAttemptTimeout = 5 * time.Second
	ensureBackoffMin     = 100 * time.Millisecond
	ensureBackoffMax     = 2 * time.Second
)

// ensureStreams is one attempt of EnsureStreamsReplicated.
func (b *Bus) ensureStreams(ctx context.Context, replicas int) error {
	for _, cfg := range StreamConfigs(replicas) {
		actx, cancel := context.WithTimeout(ctx, EnsureAttemptTimeout)
		if s, err := b.js.Stream(actx, cfg.Name); err == nil {
			cfg.Replicas = max(cfg.Replicas, s.CachedInfo().Config.Replicas)
		}
		_, err := b.js.CreateOrUpdateStream(actx, cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("events: ensure stream %s with %d replicas: %w", cfg.Name, cfg.Replicas, err)
		}
	}
	return nil
}

// JetStream API error codes that a cluster still forming answers (see
// nats-server's errors.json): no suitable peers for placement (peers not
// yet joined), and a request that reached no leader.
const (
	jsClusterNoPeers   = 10005
	jsClusterNotLeader = 10009
)

// clusterNotReady reports whether err, from an attempt whose own context
// ended or was answered, says the cluster may yet accept the streams.
func clusterNotReady(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || outage.Find(err) != nil {
		return true
	}
	ae, ok := errors.AsType[*jetstream.APIError](err)
	return ok && (ae.ErrorCode == jsClusterNoPeers || ae.ErrorCode == jsClusterNotLeader)
}

// EventSubject returns the subject of a domain event,
// am.evt.<tenant>.<domain>.<entityID>.<event>. Each token is sanitised with
// [SubjectToken], so user-supplied ids cannot add tokens or wildcards.
func EventSubject(tenant, domain, entityID, event string) string {
	return EventSubjectPrefix + SubjectToken(tenant) + "." + SubjectToken(domain) + "." +
		SubjectToken(entityID) + "." + SubjectToken(event)
}

// EntityEventsSubject is the filter matching every event of one entity,
// am.evt.<tenant>.<domain>.<entityID>.*, with the tokens sanitised as in
// [EventSubject].
func EntityEventsSubject(tenant, domain, entityID string) string {
	return EventSubjectPrefix + SubjectToken(tenant) + "." + SubjectToken(domain) + "." + SubjectToken(entityID) + ".*"
}

// WorkSubject returns the subject of a work queue, am.work.<queue>. A dotted
// queue name ("tools.sql") keeps its hierarchy; each dot-separated part is
// sanitised with [SubjectToken].
func WorkSubject(queue string) string {
	parts := strings.Split(queue, ".")
	for i, p := range parts {
		parts[i] = SubjectToken(p)
	}
	return WorkSubjectPrefix + strings.Join(parts, ".")
}

// DeadLetterSubject returns the subject a message published on original is
// dead-lettered to: am.dlq.<original>.
func DeadLetterSubject(original string) string {
	return DeadLetterSubjectPrefix + original
}

// SubjectToken makes s safe to use as one NATS subject token: '.', '*', '>',
// whitespace and control characters become '_', and the empty string becomes
// "_".
func SubjectToken(s string) string {
	if s == "" {
		return "_"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>':
			return '_'
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return '_'
		default:
			return r
		}
	}, s)
}

// validPublishSubject reports whether subject can be published to: non-empty,
// no empty tokens, no wildcards, no whitespace.
func validPublishSubject(subject string) error {
	if subject == "" {
		return fmt.Errorf("events: empty subject")
	}
	for _, tok := range strings.Split(subject, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsFunc(tok, unicode.IsSpace) {
			return fmt.Errorf("events: invalid subject %q", subject)
		}
	}
	return nil
}
