package mongostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
)

// A claim gives one worker, in any process, a thing to do (an extraction
// job) until a time it keeps pushing back while it works. Its generations
// are records with _ids "<key>/<gen>": taking a claim is inserting the next
// generation, which a unique _id admits once, on MongoDB and on FerretDB
// alike; the newest generation is the claim's state. A generation is
// written by its holder only (renewed, released), so no two processes ever
// update one record, and every lookup is by _id.

// maxClaimGenerations bounds a claim's takeovers, as a guard against a
// loop: a job is taken over once per dead or stalled worker.
const maxClaimGenerations = 1000

// Claim is a claim a worker holds. Until is how long it holds it as far
// as the store knows; the holder keeps it up to date (RenewClaim).
type Claim struct {
	Key    string
	Gen    int64
	Token  string // tells this holder's generation from a successor's
	Holder string
	Until  time.Time
}

// claimRecord is one generation of a claim.
type claimRecord struct {
	ID       string    `bson:"_id"`
	Key      string    `bson:"key"`
	Gen      int64     `bson:"gen"`
	Token    string    `bson:"token"`
	Holder   string    `bson:"holder"`
	Until    time.Time `bson:"until"`
	Released bool      `bson:"released"`
}

func claimID(key string, gen int64) string { return fmt.Sprintf("%s/%06d", key, gen) }

// held reports whether the generation keeps others out at now.
func (r *claimRecord) held(now time.Time) bool { return r != nil && !r.Released && r.Until.After(now) }

// TakeClaim claims key for holder until now+ttl. If another holder has it
// (not released, not lapsed), it returns a *document.BusyError saying
// whom and until when. It costs one insert when the key was never
// claimed, a few reads by _id when it was.
func (s *Store) TakeClaim(ctx context.Context, key, holder string, now time.Time, ttl time.Duration) (*Claim, error) {
	token := make([]byte, 12)
	_, _ = rand.Read(token)
	c := &Claim{Key: key, Gen: 1, Token: hex.EncodeToString(token), Holder: holder, Until: now.Add(ttl).Truncate(time.Millisecond)}
	for range maxClaimGenerations {
		rec := claimRecord{ID: claimID(key, c.Gen), Key: key, Gen: c.Gen, Token: c.Token, Holder: holder, Until: c.Until}
		_, err := s.claims.InsertOne(ctx, rec)
		if err == nil {
			return c, nil
		}
		if err = mongox.Translate(err); !errors.Is(err, mongox.ErrDuplicate) {
			return nil, fmt.Errorf("mongostore: claim %s: %w", key, err)
		}
		latest, err := s.latestClaim(ctx, key, c.Gen)
		if err != nil {
			return nil, err
		}
		if latest.held(now) {
			return nil, &document.BusyError{Holder: latest.Holder, Until: latest.Until}
		}
		if latest != nil {
			c.Gen = latest.Gen + 1
		}
	}
	return nil, fmt.Errorf("mongostore: claim %s: more than %d generations", key, maxClaimGenerations)
}

// latestClaim returns the newest generation of key from gen on (nil if
// gen itself is gone, dropped meanwhile), probing later ones by _id.
func (s *Store) latestClaim(ctx context.Context, key string, gen int64) (*claimRecord, error) {
	var latest *claimRecord
	for ; ; gen++ {
		var r claimRecord
		err := s.claims.FindOne(ctx, byID(claimID(key, gen))).Decode(&r)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return latest, nil
		}
		if err != nil {
			return nil, fmt.Errorf("mongostore: claim %s: %w", key, mongox.Translate(err))
		}
		latest = &r
	}
}

// RenewClaim holds c until now+ttl, and returns document.ErrClaimLost if
// a successor took it over (it lapsed) or it is no longer c's.
func (s *Store) RenewClaim(ctx context.Context, c *Claim, now time.Time, ttl time.Duration) error {
	err := s.claims.FindOne(ctx, byID(claimID(c.Key, c.Gen+1)), options.FindOne().SetProjection(bson.D{{Key: "_id", Value: 1}})).Err()
	switch {
	case err == nil:
		return fmt.Errorf("%w: %s was taken over", document.ErrClaimLost, c.Key)
	case !errors.Is(err, mongo.ErrNoDocuments):
		return fmt.Errorf("mongostore: renew claim %s: %w", c.Key, mongox.Translate(err))
	}
	until := now.Add(ttl).Truncate(time.Millisecond)
	ok, err := mongox.UpdateIf(ctx, s.claims, claimID(c.Key, c.Gen), c.cond(), bson.M{"$set": bson.M{"until": until}}, nil)
	if err != nil {
		return fmt.Errorf("mongostore: renew claim %s: %w", c.Key, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", document.ErrClaimLost, c.Key)
	}
	c.Until = until
	return nil
}

// cond is the condition that c's generation is still held by c.
func (c *Claim) cond() bson.D {
	return bson.D{{Key: "token", Value: c.Token}, {Key: "released", Value: false}}
}

// ReleaseClaim lets c go, so that another worker may take it at once
// rather than when it lapses.
func (s *Store) ReleaseClaim(ctx context.Context, c *Claim) error {
	_, err := mongox.UpdateIf(ctx, s.claims, claimID(c.Key, c.Gen), c.cond(), bson.M{"$set": bson.M{"released": true}}, nil)
	if err != nil {
		return fmt.Errorf("mongostore: release claim %s: %w", c.Key, err)
	}
	return nil
}

// DropClaim deletes c's generation and every earlier one, newest first,
// in one command: once the claimed work is done for good no one needs
// them, and a worker that claims the key again (a late redelivery) finds
// the work done. Deleting newest first keeps the remaining generations a
// prefix, so a claim taken meanwhile is never mistaken for the newest.
func (s *Store) DropClaim(ctx context.Context, c *Claim) error {
	models := make([]mongo.WriteModel, 0, c.Gen)
	for gen := c.Gen; gen >= 1; gen-- {
		models = append(models, mongo.NewDeleteOneModel().SetFilter(byID(claimID(c.Key, gen))))
	}
	if _, err := s.claims.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true)); err != nil {
		return fmt.Errorf("mongostore: drop claim %s: %w", c.Key, mongox.Translate(err))
	}
	return nil
}
