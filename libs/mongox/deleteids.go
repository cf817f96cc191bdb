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

var (
	// deletersByURI holds the deleters of servers (RegisterIDDeleter).
	deletersByURI sync.Map // URI → IDDeleter
	// clientDeleters holds the deleter each client's DeleteIDs uses.
	clientDeleters sync.Map // *mongo.Client → IDDeleter
	// clientGates holds the write gate of each client Connect made as
	// the only writer.
	clientGates sync.Map // *mongo.Client → *writeGate
	// directObservers holds, per client, a function told of each
	// statement run beneath the wire protocol (ObserveDirect).
	directObservers sync.Map // *mongo.Client → func(cmd, coll string)
)

// RegisterIDDeleter makes d serve DeleteIDs for the single-writer clients
// Connect opens to uri from now on (agentmesh up registers its embedded
// FerretDB's). The returned function undoes it for later clients.
func RegisterIDDeleter(uri string, d IDDeleter) (unregister func()) {
	deletersByURI.Store(uri, d)
	return func() { deletersByURI.CompareAndDelete(uri, d) }
}

// BindIDDeleter makes d serve client's DeleteIDs once client is declared
// the only writer (for clients tests connect themselves; Connect binds the
// deleter registered for its URI).
func BindIDDeleter(client *mongo.Client, d IDDeleter) { clientDeleters.Store(client, d) }

// ObserveDirect has fn told of every statement DeleteIDs runs for client
// beneath the wire protocol, as ("delete", collection), where a command
// monitor sees only the driver's commands: a test's count of round trips
// counts those too.
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
	client := coll.Database().Client()
	if d, ok := clientDeleters.Load(client); ok && SingleWriter(coll.Database()) {
		n, served, err := deleteDirect(ctx, client, d.(IDDeleter), coll, ids)
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

// deleteDirect has d delete ids from coll in client's write turn.
func deleteDirect(ctx context.Context, client *mongo.Client, d IDDeleter, coll *mongo.Collection, ids []any) (int64, bool, error) {
	if g, ok := clientGates.Load(client); ok {
		gate := g.(*writeGate)
		if !gate.acquire(ctx, priority.IsInteractive(ctx)) {
			return 0, true, fmt.Errorf("mongox: delete by _id: %w", ctx.Err())
		}
		defer gate.release()
	}
	n, served, err := d.DeleteIDs(ctx, coll.Database().Name(), coll.Name(), ids)
	if served {
		if fn, ok := directObservers.Load(client); ok {
			fn.(func(cmd, coll string))("delete", coll.Name())
		}
	}
	if err != nil {
		return 0, true, fmt.Errorf("mongox: delete by _id from %s: %w", coll.Name(), err)
	}
	return n, served, nil
}
