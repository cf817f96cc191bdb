package mongox

import "go.mongodb.org/mongo-driver/v2/bson"

// Keyset orders a listing by Field, then by _id, both descending (newest
// first) or both ascending, and continues it after the last document of a
// page: pages read on from where the last one ended, not by skipping what
// earlier pages returned, and a document written meanwhile is neither
// repeated nor skipped.
type Keyset struct {
	Field      string
	Descending bool
}

// Sort is the listing's order.
func (k Keyset) Sort() bson.D {
	dir := 1
	if k.Descending {
		dir = -1
	}
	return bson.D{{Key: k.Field, Value: dir}, {Key: "_id", Value: dir}}
}

// After is the filter element that keeps the documents that come after
// the one whose Field is value and whose _id is id, in that order.
func (k Keyset) After(value, id any) bson.E {
	op := "$gt"
	if k.Descending {
		op = "$lt"
	}
	return bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: k.Field, Value: bson.D{{Key: op, Value: value}}}},
		bson.D{{Key: k.Field, Value: value}, {Key: "_id", Value: bson.D{{Key: op, Value: id}}}},
	}}
}
