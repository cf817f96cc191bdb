// Package mongox connects to MongoDB (or the embedded FerretDB, which speaks
// its wire protocol) and holds the few storage patterns every service uses:
// ensuring indexes at start, translating driver errors, and optimistic
// concurrency on a `version` field.
//
// Everything here stays inside the subset FerretDB v1 and MongoDB both serve:
// single-document writes, unique indexes, upserts, $inc, findOneAndUpdate.
package mongox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

// Errors returned by helpers in this package and by stores that translate
// driver errors with Translate.
var (
	// ErrNotFound means no document matched.
	ErrNotFound = errors.New("not found")
	// ErrDuplicate means a unique index rejected the write.
	ErrDuplicate = errors.New("already exists")
	// ErrConflict means the document's version moved on since it was read.
	ErrConflict = errors.New("version conflict")
)

// Config configures the connection. Services embed it in their config.
type Config struct {
	// URI is the MongoDB connection string.
	URI string `env:"MONGO_URI" required:"true" secret:"true" help:"MongoDB connection string"`
	// Database overrides the database named in the URI.
	Database string `env:"MONGO_DATABASE" default:"agentmesh" help:"database name"`
	// ConnectTimeout bounds the first connection.
	ConnectTimeout time.Duration `env:"MONGO_CONNECT_TIMEOUT" default:"10s" help:"timeout for the first connection"`
}

// Connect opens a client, pings it and returns the configured database. The
// caller disconnects the client on shutdown.
func Connect(ctx context.Context, cfg Config) (*mongo.Client, *mongo.Database, error) {
	db := cfg.Database
	if cs, err := connstring.ParseAndValidate(cfg.URI); err == nil && db == "" {
		db = cs.Database
	}
	if db == "" {
		db = "agentmesh"
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	opts := options.Client().ApplyURI(cfg.URI).
		SetServerSelectionTimeout(timeout).
		SetConnectTimeout(timeout).
		SetAppName("agentmesh")
	client, err := mongo.Connect(opts)
	if err != nil {
		// The driver quotes the URI in some errors; never pass it on.
		return nil, nil, errors.New("mongox: invalid MONGO_URI")
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := client.Ping(pctx, nil); err != nil {
		_ = client.Disconnect(context.Background())
		return nil, nil, fmt.Errorf("mongox: ping: %w", err)
	}
	return client, client.Database(db), nil
}

// Ping checks the connection; use it as a health check.
func Ping(ctx context.Context, db *mongo.Database) error {
	return db.Client().Ping(ctx, nil)
}

// Index is an index to ensure on a collection.
type Index struct {
	// Keys in order, e.g. bson.D{{Key: "scope.tenant_id", Value: 1}}.
	Keys bson.D
	// Unique makes the index reject duplicates.
	Unique bool
	// Name overrides the generated name.
	Name string
}

// EnsureIndexes creates the given indexes on coll if they are missing.
// Creating an index that already exists with the same definition is a no-op,
// so every service calls this at start.
//
// Indexes are created one createIndexes command at a time: FerretDB v1.24
// panics (and drops the connection) on a createIndexes naming two or more
// indexes that all exist already, i.e. on every restart.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, indexes ...Index) error {
	for _, ix := range indexes {
		o := options.Index()
		if ix.Unique {
			o.SetUnique(true)
		}
		if ix.Name != "" {
			o.SetName(ix.Name)
		}
		if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: ix.Keys, Options: o}); err != nil {
			return fmt.Errorf("mongox: ensure indexes on %s: %w", coll.Name(), err)
		}
	}
	return nil
}

// Translate maps driver errors to this package's sentinels (wrapped, so the
// original stays visible to errors.As), leaving other errors as they are.
func Translate(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, mongo.ErrNoDocuments):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	case mongo.IsDuplicateKeyError(err):
		return fmt.Errorf("%w: %w", ErrDuplicate, err)
	}
	return err
}

// UpdateVersioned applies update to the document matching filter whose
// `version` field equals version, and increments the version in the same
// write. It returns ErrConflict when the document exists with another version
// (someone else wrote first), ErrNotFound when nothing matches filter at all.
// update must not touch `version` itself. When filter selects by _id, the
// write holds LockDocument for that document (see LockDocument for why).
func UpdateVersioned(ctx context.Context, coll *mongo.Collection, filter bson.D, version int64, update bson.M) error {
	for _, e := range filter {
		if e.Key == "_id" {
			defer LockDocument(coll, e.Value)()
			break
		}
	}
	f := append(bson.D{}, filter...)
	f = append(f, bson.E{Key: "version", Value: version})
	u := bson.M{}
	for k, v := range update {
		u[k] = v
	}
	inc, _ := u["$inc"].(bson.M)
	if inc == nil {
		inc = bson.M{}
	}
	inc["version"] = int64(1)
	u["$inc"] = inc
	res, err := coll.UpdateOne(ctx, f, u)
	if err != nil {
		return Translate(err)
	}
	if res.MatchedCount == 1 {
		return nil
	}
	n, err := coll.CountDocuments(ctx, filter)
	if err != nil {
		return Translate(err)
	}
	if n == 0 {
		return ErrNotFound
	}
	return ErrConflict
}
