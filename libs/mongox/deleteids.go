package mongox

import (
	"context"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/priority"
)

// IDDeleter deletes documents by _id beneath the wire protocol, all of
// them in one statement. The embedded FerretDB (libs/testkit) is one: it
// deletes the rows from its SQLite file, where FerretDB serves each
// delete statement of a command by reading and parsing the document first,
// in a transaction of its own (20 documents: 9.4 ms through FerretDB,
// 0.5 ms in one statement).
type IDDeleter interface {
	// DeleteIDs deletes the documents of collection coll in database db
	// whose _id is one of ids and reports how many it deleted. Served is
	// false, and nothing was done, when it cannot key one of ids (it keys
	// strings and ObjectIDs, as FerretDB's own lookups by _id do).
	DeleteIDs(ctx context.Context, db, coll string, ids []any) (deleted int64, served bool, err error)
}

// DocInserter inserts documents beneath the wire protocol. The embedded
// FerretDB (libs/testkit) is one: it writes them into its SQLite file as
// FerretDB's own insert would, where FerretDB decodes each command's
// documents into its own types and encodes them again.
type DocInserter interface {
	// InsertDocs inserts docs (each led by its _id) into collection coll
	// of database db, in one transaction, and returns each one's outcome:
	// an _id already taken fails that one alone (ErrDuplicate). Served is
	// false, and nothing was done, when it cannot write one of them as
	// the server would (the caller sends them through the driver).
	InsertDocs(ctx context.Context, db, coll string, docs []bson.Raw) (errs []error, served bool, err error)
}

// DocReplacer replaces documents by _id beneath the wire protocol. The
// embedded FerretDB (libs/testkit) is one: it writes the document over
// the stored one in its SQLite file, where FerretDB reads and decodes the
// stored document, applies the update to it and encodes the result again,
// each in a transaction of its own.
type DocReplacer interface {
	// ReplaceDoc writes doc (led by its _id) over the document of
	// collection coll in database db with that _id, and reports whether
	// there was one. Served is false, and nothing was done, when it cannot
	// write doc as the server would (the caller sends it through the
	// driver).
	ReplaceDoc(ctx context.Context, db, coll string, doc bson.Raw) (matched, served bool, err error)
}

var (
	// directByURI holds the direct writers of servers (RegisterDirect).
	directByURI sync.Map // URI → IDDeleter, maybe a DocInserter and a DocReplacer too
	// clientDirect holds the direct writer each client uses.
	clientDirect sync.Map // *mongo.Client → IDDeleter, maybe a DocInserter and a DocReplacer too
	// clientGates holds the write gate of each client Connect made as
	// the only writer.
	clientGates sync.Map // *mongo.Client → *writeGate
	// directObservers holds, per client, a function told of each
	// statement run beneath the wire protocol (ObserveDirect).
	directObservers sync.Map // *mongo.Client → func(cmd, coll string)
)

// RegisterDirect makes d serve DeleteIDs, InsertEach if d is also a
// DocInserter and ReplaceByID if it is a DocReplacer, for the single-writer
// clients Connect opens to uri from now
// on (agentmesh up registers its embedded FerretDB). The returned function
// undoes it for later clients.
func RegisterDirect(uri string, d IDDeleter) (unregister func()) {
	directByURI.Store(uri, d)
	return func() { directByURI.CompareAndDelete(uri, d) }
}

// BindDirect makes d serve client's DeleteIDs, InsertEach and ReplaceByID
// as RegisterDirect does, once client is declared the only writer (for clients
// tests connect themselves; Connect binds the one registered for its URI).
func BindDirect(client *mongo.Client, d IDDeleter) { clientDirect.Store(client, d) }

// ObserveDirect has fn told of every write DeleteIDs, InsertEach and
// ReplaceByID make for client beneath the wire protocol, as ("delete",
// "insert" or "update", collection), where a command monitor sees only the driver's commands: a
// test's count of round trips counts those too.
func ObserveDirect(client *mongo.Client, fn func(cmd, coll string)) {
	directObservers.Store(client, fn)
}

// DeleteIDs deletes the documents of coll whose _id is one of ids and
// reports how many it deleted. The only writer's client with a deleter
// (agentmesh up's, on its embedded FerretDB) deletes them in one statement,
// in its write turn as a write command takes one (Config.SingleWriter);
// any other client, or ids the deleter cannot key, sends one unordered
// command of deletes by _id. No filter but _id is checked: a caller that
// must not delete a document written meanwhile holds its lock
// (LockDocument) or checks a version itself.
func DeleteIDs(ctx context.Context, coll *mongo.Collection, ids []any) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	if d, ok := directAs[IDDeleter](coll.Database()); ok {
		n, served, err := direct(ctx, coll, "delete", func() (int64, bool, error) {
			return d.DeleteIDs(ctx, coll.Database().Name(), coll.Name(), ids)
		})
		if served || err != nil {
			return n, err
		}
	}
	deletes := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		deletes[i] = mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}})
	}
	res, err := coll.BulkWrite(ctx, deletes, options.BulkWrite().SetOrdered(false))
	if err != nil {
		return 0, Translate(err)
	}
	return res.DeletedCount, nil
}

// ReplaceByID writes doc, whose _id is id, over the document of coll with
// that _id, and reports whether there was one (nothing is written if not).
// The only writer's client with a DocReplacer (agentmesh up's, on its
// embedded FerretDB) writes it beneath the driver, in its write turn, when
// it can write it as the server would; any other client sends a replace by
// _id. No filter but _id is checked: a caller that must not overwrite a
// write made meanwhile holds the document's lock (LockDocument) or checks
// a version itself. A unique index that refuses it fails it with
// ErrDuplicate.
func ReplaceByID(ctx context.Context, coll *mongo.Collection, id, doc any) (bool, error) {
	if r, ok := directAs[DocReplacer](coll.Database()); ok {
		if raw, err := encodeDoc(doc); err == nil && idOf(raw) == id {
			matched, served, err := direct(ctx, coll, "update", func() (bool, bool, error) {
				return r.ReplaceDoc(ctx, coll.Database().Name(), coll.Name(), raw)
			})
			if served || err != nil {
				return matched, Translate(err)
			}
		}
	}
	res, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: id}}, doc)
	if err != nil {
		return false, Translate(err)
	}
	return res.MatchedCount > 0, nil
}

// encodeDoc encodes doc as the driver does (with its default registry and
// options, which the mesh's clients keep); a document already encoded
// (bson.Raw) is taken as it is, as the driver takes it.
func encodeDoc(doc any) (bson.Raw, error) {
	if raw, ok := doc.(bson.Raw); ok {
		return raw, nil
	}
	return bson.Marshal(doc)
}

// idOf returns the _id of doc as the driver decodes it into an interface
// (a string, an ObjectID, ...), or nil if doc has none or it is led by
// another field.
func idOf(doc bson.Raw) any {
	first, err := doc.IndexErr(0)
	if err != nil || first.Key() != "_id" {
		return nil
	}
	switch v := first.Value(); v.Type {
	case bson.TypeString:
		return v.StringValue()
	case bson.TypeObjectID:
		return v.ObjectID()
	}
	return nil
}

// directAs returns the direct writer of db's client as a W (an IDDeleter,
// DocInserter or DocReplacer) when that client is the only writer and has
// one that is a W.
func directAs[W any](db *mongo.Database) (W, bool) {
	d, ok := clientDirect.Load(db.Client())
	if !ok || !SingleWriter(db) {
		var zero W
		return zero, false
	}
	w, ok := d.(W)
	return w, ok
}

// direct runs write (cmd on coll beneath the wire protocol) in the write
// turn of coll's client, tells the client's observer of it if served, and
// names the command in its error.
func direct[T any](ctx context.Context, coll *mongo.Collection, cmd string, write func() (T, bool, error)) (T, bool, error) {
	var zero T
	client := coll.Database().Client()
	if g, ok := clientGates.Load(client); ok {
		gate := g.(*writeGate)
		if !gate.acquire(ctx, priority.IsInteractive(ctx)) {
			return zero, true, fmt.Errorf("mongox: %s %s: %w", cmd, coll.Name(), ctx.Err())
		}
		defer gate.release()
	}
	v, served, err := write()
	if served {
		if fn, ok := directObservers.Load(client); ok {
			fn.(func(cmd, coll string))(cmd, coll.Name())
		}
	}
	if err != nil {
		return zero, true, fmt.Errorf("mongox: %s %s: %w", cmd, coll.Name(), err)
	}
	return v, served, nil
}
