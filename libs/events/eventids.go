package events

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// EventIDs turns AM_EVENTS sequences into the event ids clients see and
// back. The stream numbers every tenant's events in one sequence, so
// handing its numbers out would let a tenant count the other tenants'
// events between two of its own, or find the stream's newest number by
// asking to resume after guessed ones. An event id is instead the
// sequence under a keyed permutation: ids of one watch are unrelated
// numbers, not ordered, and an id nobody was given names no event (it
// decodes to a sequence far beyond the stream's).
//
// The permutation is a Feistel network of eight rounds (AES-128 as the
// round function) over 52 bits, so ids stay exact in a JavaScript number
// (below 2^53); 0 ("none", "from the start") maps to itself, and the
// sequences at and above 2^52, which no stream reaches, map to themselves.
// Every replica of every service must map alike: the key lives in the
// JetStream key-value bucket [EventIDsBucket], created once by the first
// service to start and read by the others ([Bus.EventIDs]).
//
// A nil *EventIDs maps every number to itself (a service without an event
// bus has no sequences: they are 0).
type EventIDs struct {
	block cipher.Block
}

// The key's home.
const (
	// EventIDsBucket is the key-value bucket holding the event-id key.
	EventIDsBucket = "AM_EVENT_IDS"
	eventIDsKey    = "key"
)

const (
	idHalfBits = 26
	idHalfMask = 1<<idHalfBits - 1
	idDomain   = 1 << (2 * idHalfBits) // 2^52
	idRounds   = 8
)

// NewEventIDs returns the mapping under a 16-byte key.
func NewEventIDs(key []byte) (*EventIDs, error) {
	if len(key) != 16 {
		return nil, fmt.Errorf("events: event-id key has %d bytes, want 16", len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("events: event-id key: %w", err)
	}
	return &EventIDs{block: b}, nil
}

// ID returns the event id clients see for stream sequence seq.
func (m *EventIDs) ID(seq uint64) uint64 { return m.mapped(seq, false) }

// Seq returns the stream sequence of event id; an id that was never given
// out yields a sequence no event has (almost always one far beyond the
// stream's newest).
func (m *EventIDs) Seq(id uint64) uint64 { return m.mapped(id, true) }

// mapped is ID (or Seq, inverse): the permutation on 1 .. 2^52-1, with 0
// and the numbers from 2^52 up mapped to themselves. 0 is kept for
// "none": the number the permutation sends there takes 0's own image,
// which no other number has.
func (m *EventIDs) mapped(x uint64, inverse bool) uint64 {
	if m == nil || x == 0 || x >= idDomain {
		return x
	}
	y := m.permute(x, inverse)
	if y == 0 {
		y = m.permute(0, inverse)
	}
	return y
}

// permute applies the Feistel network to x (< 2^52), or its inverse.
func (m *EventIDs) permute(x uint64, inverse bool) uint64 {
	l, r := uint32(x>>idHalfBits), uint32(x&idHalfMask)
	if !inverse {
		for i := range idRounds {
			l, r = r, l^m.round(i, r)
		}
		return uint64(l)<<idHalfBits | uint64(r)
	}
	for i := idRounds - 1; i >= 0; i-- {
		l, r = r^m.round(i, l), l
	}
	return uint64(l)<<idHalfBits | uint64(r)
}

// round is the round function: 26 bits of AES_k(i, half).
func (m *EventIDs) round(i int, half uint32) uint32 {
	var in, out [aes.BlockSize]byte
	in[0] = byte(i)
	binary.BigEndian.PutUint32(in[1:], half)
	m.block.Encrypt(out[:], in[:])
	return binary.BigEndian.Uint32(out[:]) & idHalfMask
}

// EventIDs returns the mesh's event-id mapping, reading its key from the
// [EventIDsBucket] bucket, or creating both if no service has yet (with
// the replicas of the streams [Bus.EnsureStreamsReplicated] made, else
// one). Two services that start at once agree: the key is created only if
// absent, and the loser reads the winner's. The mapping is kept for the
// Bus's life once read. A nil Bus (a service without an event bus, whose
// sequences are all 0) has the nil mapping.
func (b *Bus) EventIDs(ctx context.Context) (*EventIDs, error) {
	if b == nil {
		return nil, nil
	}
	b.idsMu.Lock()
	defer b.idsMu.Unlock()
	if b.ids != nil {
		return b.ids, nil
	}
	replicas := 1
	if s, err := b.js.Stream(ctx, StreamEvents); err == nil {
		replicas = max(replicas, s.CachedInfo().Config.Replicas)
	}
	ids, err := b.loadEventIDs(ctx, replicas)
	if err != nil {
		return nil, err
	}
	b.ids = ids
	return ids, nil
}

// eventIDsConfig is the bucket of the event-id key, with replicas copies.
func eventIDsConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:      EventIDsBucket,
		Description: "agentmesh: the key that turns event sequences into event ids",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	}
}

// Retries of a key another service just created, which a replica of the
// bucket that has not caught up yet may not have (KV reads may be served
// by any replica).
const (
	eventIDsReadTries = 20
	eventIDsReadPause = 100 * time.Millisecond
)

// loadEventIDs reads the event-id key, creating the bucket (with replicas
// copies) and the key if they do not exist, and raising the bucket's
// copies to replicas if it has fewer, as the streams' are
// (EnsureStreamsReplicated): a key on one server of a cluster would make
// every service's start wait for that server.
func (b *Bus) loadEventIDs(ctx context.Context, replicas int) (*EventIDs, error) {
	kv, err := b.js.KeyValue(ctx, EventIDsBucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
		kv, err = b.js.CreateOrUpdateKeyValue(ctx, eventIDsConfig(replicas))
	case err == nil:
		if s, serr := b.js.Stream(ctx, "KV_"+EventIDsBucket); serr == nil && s.CachedInfo().Config.Replicas < replicas {
			kv, err = b.js.UpdateKeyValue(ctx, eventIDsConfig(replicas))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("events: event-id bucket: %w", err)
	}
	e, err := kv.Get(ctx, eventIDsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		key := make([]byte, 16)
		rand.Read(key)
		if _, err = kv.Create(ctx, eventIDsKey, key); err == nil {
			return NewEventIDs(key)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			e, err = readCreatedKey(ctx, kv) // another service created it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("events: event-id key: %w", err)
	}
	return NewEventIDs(e.Value())
}

// readCreatedKey reads the key another service has just created, waiting
// for a replica of the bucket that lags behind.
func readCreatedKey(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyValueEntry, error) {
	for try := 1; ; try++ {
		e, err := kv.Get(ctx, eventIDsKey)
		if err == nil || !errors.Is(err, jetstream.ErrKeyNotFound) || try == eventIDsReadTries {
			return e, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(eventIDsReadPause):
		}
	}
}
