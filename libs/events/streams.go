package events

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
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
// shrink what an operator (or another service) scaled up. It is idempotent
// and safe to call from every service at start-up. It fails if an existing
// stream cannot be updated in place (for example, its retention policy
// differs), or if the cluster has fewer servers than replicas.
func (b *Bus) EnsureStreamsReplicated(ctx context.Context, replicas int) error {
	for _, cfg := range StreamConfigs(replicas) {
		if s, err := b.js.Stream(ctx, cfg.Name); err == nil {
			cfg.Replicas = max(cfg.Replicas, s.CachedInfo().Config.Replicas)
		}
		if _, err := b.js.CreateOrUpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("events: ensure stream %s with %d replicas: %w", cfg.Name, cfg.Replicas, err)
		}
	}
	return nil
}

// EventSubject returns the subject of a domain event,
// am.evt.<tenant>.<domain>.<entityID>.<event>. Each token is sanitised with
// [SubjectToken], so user-supplied ids cannot add tokens or wildcards.
func EventSubject(tenant, domain, entityID, event string) string {
	return EventSubjectPrefix + SubjectToken(tenant) + "." + SubjectToken(domain) + "." +
		SubjectToken(entityID) + "." + SubjectToken(event)
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
