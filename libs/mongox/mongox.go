// Package mongox connects to MongoDB (or the embedded FerretDB, which speaks
// its wire protocol) and holds the few storage patterns every service uses:
// ensuring indexes at start, translating driver errors, optimistic
// concurrency on a `version` field, and reads by _id within a scope.
//
// Everything here stays inside the subset FerretDB v1 and MongoDB both serve:
// single-document writes, unique indexes, upserts, $inc, findOneAndUpdate.
//
// # Who writes: many processes, or one
//
// By default a database has many writers (replicas of each service on
// MongoDB): every state change is a conditional single-document update
// (`{_id, version}`), which MongoDB applies atomically, or a unique insert.
// Nothing here assumes that a process sees every write.
//
// A client connected with Config.SingleWriter (agentmesh up, on its embedded
// FerretDB) is the only writer of its database. FerretDB v1 on SQLite finds
// documents by an exact `{_id: x}` filter only (any other filter parses every
// document of the collection), and applies an update as a read and a write
// without isolation between clients. So in that mode UpdateVersioned reads
// the document by _id, checks the filter and the version in Go and writes it
// by _id, all under this process's lock of the document (LockDocument):
// correct because no other process writes, and as fast at 10,000 documents
// as at 10. Its write commands also take turns (one at a time per server),
// which spares SQLite's busy handler and its sleeps. Its deletes by _id
// (DeleteIDs, DeleteIf), inserts (InsertEach) and replacements by _id
// (ReplaceByID) go beneath the wire protocol when the server offers a way
// (RegisterDirect: agentmesh up registers its embedded FerretDB, which
// writes them into its SQLite file in one transaction as FerretDB would:
// FerretDB reads and parses each document of a delete command first,
// decodes and encodes again each document it inserts, and reads, decodes
// and encodes again each document it updates). Stores ask SingleWriter
// before taking shortcuts of their own (an in-memory mirror, publishing
// outbox entries from memory); with several processes those shortcuts
// would lose updates.
package mongox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"

	"github.com/agentmesh/agentmesh/libs/outage"
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
	// SingleWriter declares this process the only one writing the
	// database (see the package doc). Wrong with replicas.
	SingleWriter bool `env:"MONGO_SINGLE_WRITER" default:"false" help:"this process is the only one writing the database (agentmesh up sets it for its embedded FerretDB): writes check versions in process and go by _id; never set it for replicas"`
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
	if cfg.SingleWriter {
		// The only writer's writes take turns (see writeGate).
		opts.SetMonitor(gateFor(cfg.URI).monitor())
	}
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
	if cfg.SingleWriter {
		MarkSingleWriter(client)
		clientGates.Store(client, gateFor(cfg.URI))
		if d, ok := directByURI.Load(cfg.URI); ok {
			BindDirect(client, d.(IDDeleter))
		}
	}
	return client, client.Database(db), nil
}

// singleWriters holds the clients connected with Config.SingleWriter.
var singleWriters sync.Map // *mongo.Client → struct{}

// MarkSingleWriter declares client's process the only writer of the
// databases it reaches (Connect does it for Config.SingleWriter; tests that
// connect on their own call it).
func MarkSingleWriter(client *mongo.Client) { singleWriters.Store(client, struct{}{}) }

// SingleWriter reports whether db's client was declared the only writer.
func SingleWriter(db *mongo.Database) bool {
	_, ok := singleWriters.Load(db.Client())
	return ok
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
	// Sparse leaves out of the index the documents that lack its fields,
	// so {field: {$exists: true}} reads only those (MongoDB; FerretDB v1
	// accepts the option and ignores it, as it ignores every index for
	// reads).
	Sparse bool
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
		if ix.Sparse {
			o.SetSparse(true)
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

// DropIndexes drops the named indexes of coll that exist, e.g. those an
// index with more keys superseded; a name that is not there (never made,
// or dropped by another process first) is no error. Call it at start,
// after EnsureIndexes made the indexes that replace them.
func DropIndexes(ctx context.Context, coll *mongo.Collection, names ...string) error {
	for _, name := range names {
		err := coll.Indexes().DropOne(ctx, name)
		var ce mongo.CommandError
		if err != nil && !(errors.As(err, &ce) && (ce.Code == indexNotFound || ce.Code == namespaceNotFound)) {
			return fmt.Errorf("mongox: drop index %s of %s: %w", name, coll.Name(), err)
		}
	}
	return nil
}

// Server codes for dropping an index that is not there, or an index of a
// collection that is not there.
const (
	indexNotFound     = 27
	namespaceNotFound = 26
)

// Translate maps driver errors to this package's sentinels (wrapped, so the
// original stays visible to errors.As), and a database that cannot be
// reached (no server selectable, connection refused or reset, client
// disconnected) to an *outage.Error, which carries gRPC's Unavailable
// through any wrapping. Other errors are left as they are.
func Translate(err error) error {
	err = outage.Mark(err)
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
// write holds LockDocument for that document (see LockDocument for why), and
// for a single writer it is the read and write by _id the package doc
// describes (filter's other fields must then be plain values).
func UpdateVersioned(ctx context.Context, coll *mongo.Collection, filter bson.D, version int64, update bson.M) error {
	return UpdateVersionedIf(ctx, coll, filter, version, nil, update)
}

// UpdateVersionedIf is UpdateVersioned that also requires the fields of
// cond (plain values, as UpdateIf's) to hold: when they do not, it is
// ErrConflict, as a version that moved on — cond holds what the caller
// read of fields other writers change without moving the version.
func UpdateVersionedIf(ctx context.Context, coll *mongo.Collection, filter bson.D, version int64, cond bson.D, update bson.M) error {
	if err := checkPlain(cond); err != nil {
		return err
	}
	for _, e := range filter {
		if e.Key == "_id" {
			defer LockDocument(coll, e.Value)()
			if SingleWriter(coll.Database()) {
				return updateVersionedByID(ctx, coll, e.Value, filter, version, cond, withVersionInc(update))
			}
			break
		}
	}
	f := append(bson.D{}, filter...)
	f = append(f, bson.E{Key: "version", Value: version})
	f = append(f, cond...)
	res, err := coll.UpdateOne(ctx, f, withVersionInc(update))
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

// UpdateKnownVersion is UpdateVersioned for a single writer that knows the
// document's version because it made the document's last write (a store
// that remembers the versions it wrote): one update by _id that increments
// the version, without UpdateVersioned's read. It returns ErrNotFound when
// no document has that _id. The caller answers for the version: it must
// be the document's only writer, serialise its writes to it, and forget
// what it knew after any write whose outcome it did not see.
func UpdateKnownVersion(ctx context.Context, coll *mongo.Collection, id any, update bson.M) error {
	defer LockDocument(coll, id)()
	res, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, withVersionInc(update))
	if err != nil {
		return Translate(err)
	}
	if res.MatchedCount == 0 {
		return ErrNotFound
	}
	return nil
}

// withVersionInc returns a copy of update that also increments `version`.
func withVersionInc(update bson.M) bson.M {
	u := bson.M{}
	for k, v := range update {
		u[k] = v
	}
	inc := bson.M{}
	if old, ok := u["$inc"].(bson.M); ok {
		for k, v := range old {
			inc[k] = v
		}
	}
	inc["version"] = int64(1)
	u["$inc"] = inc
	return u
}

// updateVersionedByID is UpdateVersioned for a single writer holding the
// document's lock: read by _id, check in Go, write by _id.
func updateVersionedByID(ctx context.Context, coll *mongo.Collection, id any, filter bson.D, version int64, cond bson.D, update bson.M) error {
	proj := bson.D{{Key: "version", Value: 1}} // not the whole document: it may hold a large body
	for _, e := range slices.Concat(filter, cond) {
		if e.Key != "_id" && e.Key != "version" {
			proj = append(proj, bson.E{Key: e.Key, Value: 1})
		}
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(proj)).Raw()
	if err != nil {
		return Translate(err)
	}
	ok, err := rawMatches(raw, filter)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	if v, ok := raw.Lookup("version").AsInt64OK(); !ok || v != version {
		return ErrConflict
	}
	if ok, err := rawMatches(raw, cond); err != nil || !ok {
		return cmp.Or(err, ErrConflict)
	}
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: id}}, update); err != nil {
		return Translate(err)
	}
	return nil
}

// FindByID decodes into out the document with _id id in coll whose fields
// equal those of scope (plain values, e.g. tenant_id and project_id), and
// returns ErrNotFound when there is none. It asks the database for the _id
// alone and checks scope in Go: the one lookup FerretDB v1 finds without
// parsing the whole collection, and as exact as a compound filter.
func FindByID(ctx context.Context, coll *mongo.Collection, id any, scope bson.D, out any, opts ...options.Lister[options.FindOneOptions]) error {
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, opts...).Raw()
	if err != nil {
		return Translate(err)
	}
	ok, err := rawMatches(raw, scope)
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	return bson.Unmarshal(raw, out)
}

// rawMatches reports whether doc's top-level fields equal filter's plain
// values; an operator value (a document starting with '$') is an error.
func rawMatches(doc bson.Raw, filter bson.D) (bool, error) {
	for _, e := range filter {
		if e.Key == "_id" {
			continue
		}
		t, want, err := bson.MarshalValue(e.Value)
		if err != nil {
			return false, fmt.Errorf("mongox: filter field %s: %w", e.Key, err)
		}
		if t == bson.TypeEmbeddedDocument {
			if first, err := bson.Raw(want).IndexErr(0); err == nil && strings.HasPrefix(first.Key(), "$") {
				return false, fmt.Errorf("mongox: filter field %s: operators are not supported here", e.Key)
			}
		}
		got, err := doc.LookupErr(e.Key)
		if err != nil {
			return false, nil // absent: no match
		}
		if got.Type != t || !bytes.Equal(got.Value, want) {
			return false, nil
		}
	}
	return true, nil
}
