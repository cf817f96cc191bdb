package mongox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// UpdateIf applies update to the document with _id id if its fields equal
// cond's (plain values, compared as UpdateVersioned and FindByID compare
// them: give them the Go types they were written with), and reports
// whether it matched. It holds LockDocument(coll, id) throughout; then, if
// not nil, runs under that lock after a write that matched, so a caller can
// hand outbox entries to a relay in the order of the writes.
//
// With many writers it is one conditional update ({_id, cond...}), atomic
// on MongoDB. For a single writer it reads by _id (only cond's fields),
// checks cond in Go and writes by _id: the lookups FerretDB v1 answers
// without parsing the whole collection, correct because no other process
// writes and this one holds the lock.
func UpdateIf(ctx context.Context, coll *mongo.Collection, id any, cond bson.D, update any, then func()) (bool, error) {
	if err := checkPlain(cond); err != nil {
		return false, err
	}
	defer LockDocument(coll, id)()
	byID := bson.D{{Key: "_id", Value: id}}
	var (
		res *mongo.UpdateResult
		err error
	)
	if SingleWriter(coll.Database()) {
		ok, merr := matchesByID(ctx, coll, id, cond)
		if merr != nil || !ok {
			return false, merr
		}
		res, err = coll.UpdateOne(ctx, byID, update)
	} else {
		res, err = coll.UpdateOne(ctx, append(byID, cond...), update)
	}
	if err != nil {
		return false, Translate(err)
	}
	if res.MatchedCount == 0 {
		return false, nil
	}
	if then != nil {
		then()
	}
	return true, nil
}

// DeleteIf deletes the document with _id id if its fields equal cond's
// (as in UpdateIf), and reports whether it did. It holds
// LockDocument(coll, id); with many writers it is one conditional delete,
// for a single writer a read (none for an empty cond) and a delete by _id
// (DeleteIDs).
func DeleteIf(ctx context.Context, coll *mongo.Collection, id any, cond bson.D) (bool, error) {
	if err := checkPlain(cond); err != nil {
		return false, err
	}
	defer LockDocument(coll, id)()
	if SingleWriter(coll.Database()) {
		ok, err := matchesByID(ctx, coll, id, cond)
		if err != nil || !ok {
			return false, err
		}
		n, err := DeleteIDs(ctx, coll, []any{id})
		return n == 1, err
	}
	res, err := coll.DeleteOne(ctx, append(bson.D{{Key: "_id", Value: id}}, cond...))
	if err != nil {
		return false, Translate(err)
	}
	return res.DeletedCount == 1, nil
}

// matchesByID reports whether the document with _id id exists and its
// fields equal cond's, reading only those fields. An empty cond needs no
// read: the write's own match count tells whether the document exists.
func matchesByID(ctx context.Context, coll *mongo.Collection, id any, cond bson.D) (bool, error) {
	if len(cond) == 0 {
		return true, nil
	}
	proj := bson.D{}
	for _, e := range cond {
		proj = append(proj, bson.E{Key: e.Key, Value: 1})
	}
	raw, err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: id}}, options.FindOne().SetProjection(proj)).Raw()
	if err != nil {
		if err = Translate(err); errors.Is(err, ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return rawMatches(raw, cond)
}

// checkPlain rejects operators in cond, in both modes alike: a single
// writer checks cond in Go, which knows plain equality only.
func checkPlain(cond bson.D) error {
	for _, e := range cond {
		if e.Key == "_id" || strings.HasPrefix(e.Key, "$") {
			return fmt.Errorf("mongox: condition field %s: not a plain field", e.Key)
		}
		t, v, err := bson.MarshalValue(e.Value)
		if err != nil {
			return fmt.Errorf("mongox: condition field %s: %w", e.Key, err)
		}
		if t == bson.TypeEmbeddedDocument {
			if first, err := bson.Raw(v).IndexErr(0); err == nil && strings.HasPrefix(first.Key(), "$") {
				return fmt.Errorf("mongox: condition field %s: operators are not supported here", e.Key)
			}
		}
	}
	return nil
}

// TimeRange is the condition of a time field for a listing's range: at or
// after from, before to; a zero bound is open. It is empty when both are,
// so callers add it to a filter only when len > 0.
func TimeRange(from, to time.Time) bson.D {
	var d bson.D
	if !from.IsZero() {
		d = append(d, bson.E{Key: "$gte", Value: from})
	}
	if !to.IsZero() {
		d = append(d, bson.E{Key: "$lt", Value: to})
	}
	return d
}
