package testkit

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/outage"
)

// sjsonCorpus is documents of every type and shape our stores write,
// escapes and edge values included.
func sjsonCorpus() []bson.D {
	oid := bson.NewObjectID()
	uuid := bson.Binary{Subtype: bson.TypeBinaryUUID, Data: []byte("0123456789abcdef")}
	return []bson.D{
		{{Key: "_id", Value: "all-types"}, {Key: "s", Value: "x"}, {Key: "i32", Value: int32(-5)}, {Key: "i64", Value: int64(1) << 40},
			{Key: "max", Value: int64(math.MaxInt64)}, {Key: "f", Value: 1.5}, {Key: "whole", Value: 3.0}, {Key: "tiny", Value: 0.1},
			{Key: "huge", Value: 1e300}, {Key: "t", Value: true}, {Key: "n", Value: nil},
			{Key: "d", Value: time.Date(2026, 11, 28, 8, 0, 0, 123e6, time.UTC)}, {Key: "old", Value: time.Date(1960, 1, 2, 3, 4, 5, 0, time.UTC)},
			{Key: "oid", Value: oid}, {Key: "bin", Value: []byte{0, 1, 2, 255}}, {Key: "empty_bin", Value: []byte{}}, {Key: "uuid", Value: uuid}},
		{{Key: "_id", Value: oid}, {Key: "escapes", Value: "<&>\u2028\u2029\"\\\n\t\x01"}, {Key: "unicode", Value: "日本 é 😀"},
			{Key: "doc", Value: bson.D{{Key: "a", Value: int32(1)}, {Key: `k"ey<&>`, Value: "v"}, {Key: "ü", Value: bson.D{{Key: "deep", Value: bson.A{}}}}}},
			{Key: "arr", Value: bson.A{int32(1), "x", bson.D{{Key: "z", Value: int64(1)}, {Key: "list", Value: bson.A{1.5, nil}}}, nil, 2.5, oid, true}},
			{Key: "empty_arr", Value: bson.A{}}, {Key: "empty_doc", Value: bson.D{}}, {Key: "nested_id", Value: bson.D{{Key: "_id", Value: "first"}, {Key: "x", Value: 1}}}},
		// An analysis job as jobstore writes it, with an outbox entry.
		{{Key: "_id", Value: "01a22128-3adc-79be-a12e-dac5f459890b"}, {Key: "root_id", Value: "01a22128-3adc-79be-a12e-dac5f459890b"},
			{Key: "type", Value: "analysis_request"}, {Key: "status", Value: "pending"}, {Key: "seq", Value: int32(0)},
			{Key: "input_json", Value: `{"query":"Analyse BHP's quarter 25","response_type":"generic_analysis"}`},
			{Key: "create_time", Value: time.Now()}, {Key: "version", Value: int64(1)},
			{Key: "outbox", Value: bson.A{bson.D{{Key: "id", Value: "606aff68"}, {Key: "subject", Value: "am.evt.acme.job.x.y.complete"}, {Key: "data", Value: []byte("\n$606aff68")}}}}},
	}
}

// TestEncodeSJSONWritesAsFerretDB: for every document of the corpus,
// encodeSJSON's text is byte for byte what FerretDB itself stored for the
// same document inserted through the driver; and the documents FerretDB
// would change or refuse are not encoded.
func TestEncodeSJSONWritesAsFerretDB(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	_, client := StartPrivate(t, dir)
	coll := client.Database("enc").Collection("docs")
	corpus := sjsonCorpus()
	for _, d := range corpus {
		if _, err := coll.InsertOne(ctx, d); err != nil {
			t.Fatalf("insert %v: %v", d[0].Value, err)
		}
	}
	sdb := openDBFile(t, dir, "enc", "mode=ro")
	table := tableName(t, sdb, "docs")
	for _, d := range corpus {
		raw, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		key, _ := encodeSJSON(bson.Raw(must(bson.Marshal(bson.D{{Key: "_id", Value: d[0].Value}}))))
		var stored string
		if err := sdb.QueryRow(`SELECT _ferretdb_sjson FROM `+quoteIdent(table)+` WHERE _ferretdb_sjson->'$._id' = `+
			`(? ->'$._id')`, string(key)).Scan(&stored); err != nil {
			t.Fatalf("read %v back: %v", d[0].Value, err)
		}
		got, ok := encodeSJSON(raw)
		if !ok {
			t.Fatalf("%v: not encoded", d[0].Value)
		}
		if string(got) != stored {
			t.Errorf("%v:\n got %s\nwant %s", d[0].Value, got, stored)
		}
	}

	for name, d := range map[string]bson.D{
		"int32 _id":            {{Key: "_id", Value: int32(1)}},
		"_id not first":        {{Key: "a", Value: 1}, {Key: "_id", Value: "x"}},
		"no _id":               {{Key: "a", Value: 1}},
		"$ key":                {{Key: "_id", Value: "x"}, {Key: "$set", Value: 1}},
		"dotted key":           {{Key: "_id", Value: "x"}, {Key: "a.b", Value: 1}},
		"dotted nested key":    {{Key: "_id", Value: "x"}, {Key: "d", Value: bson.D{{Key: "a.b", Value: 1}}}},
		"key needing escapes":  {{Key: "_id", Value: "x"}, {Key: `q"`, Value: 1}},
		"duplicate key":        {{Key: "_id", Value: "x"}, {Key: "a", Value: 1}, {Key: "a", Value: 2}},
		"negative zero":        {{Key: "_id", Value: "x"}, {Key: "f", Value: math.Copysign(0, -1)}},
		"NaN":                  {{Key: "_id", Value: "x"}, {Key: "f", Value: math.NaN()}},
		"infinity":             {{Key: "_id", Value: "x"}, {Key: "f", Value: math.Inf(1)}},
		"nested array":         {{Key: "_id", Value: "x"}, {Key: "a", Value: bson.A{bson.A{1}}}},
		"nested _id not first": {{Key: "_id", Value: "x"}, {Key: "d", Value: bson.D{{Key: "k", Value: 1}, {Key: "_id", Value: 2}}}},
		"regex":                {{Key: "_id", Value: "x"}, {Key: "r", Value: bson.Regex{Pattern: "a"}}},
		"timestamp":            {{Key: "_id", Value: "x"}, {Key: "ts", Value: bson.Timestamp{T: 1}}},
		"decimal":              {{Key: "_id", Value: "x"}, {Key: "d", Value: bson.NewDecimal128(1, 1)}},
		"invalid UTF-8":        {{Key: "_id", Value: "x"}, {Key: "s", Value: "\xff"}},
	} {
		if b, ok := encodeSJSON(must(bson.Marshal(d))); ok {
			t.Errorf("%s: encoded %s, want it left to FerretDB", name, b)
		}
	}
}

// StartPrivate starts a server of the test's own on dir, with a client:
// t.Cleanup disconnects it and stops the server.
func StartPrivate(t *testing.T, dir string) (*Mongo, *mongo.Client) {
	t.Helper()
	m, err := StartMongo(context.Background(), MongoOptions{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return m, client
}

// openDBFile opens the SQLite file of database db under dir with the
// query parameters params ("mode=ro", say), closed when the test ends.
func openDBFile(t *testing.T, dir, db, params string) *sql.DB {
	t.Helper()
	sdb, err := sql.Open("sqlite", "file:"+filepath.Join(dir, db+".sqlite")+"?"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	return sdb
}

// tableName is the SQLite table FerretDB keeps collection coll in.
func tableName(t *testing.T, sdb *sql.DB, coll string) string {
	t.Helper()
	var table string
	if err := sdb.QueryRow(`SELECT table_name FROM _ferretdb_collections WHERE name = ?`, coll).Scan(&table); err != nil {
		t.Fatal(err)
	}
	return table
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestEmbeddedMongoInsertsDocs: documents InsertDocs writes read back
// through FerretDB as inserted, by _id and by a scan; a taken _id fails
// that document alone (mongox.ErrDuplicate) and the others are stored; a
// document it cannot write as FerretDB would (one over 16 MiB included),
// or a collection FerretDB has not made (or dropped), is not served and
// nothing is written; a unique secondary index refuses a document alone,
// and a cancelled call stores nothing.
func TestEmbeddedMongoInsertsDocs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client := StartPrivate(t, t.TempDir())
	coll := client.Database("ins").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "taken"}}); err != nil {
		t.Fatal(err)
	}
	corpus := sjsonCorpus()
	var raws []bson.Raw
	for _, d := range corpus {
		raws = append(raws, must(bson.Marshal(d)))
	}
	raws = append(raws, must(bson.Marshal(bson.D{{Key: "_id", Value: "taken"}, {Key: "n", Value: 2}})))
	errs, served, err := m.InsertDocs(ctx, "ins", "docs", raws)
	if err != nil || !served || len(errs) != len(raws) {
		t.Fatalf("InsertDocs = %v, %v, %v", errs, served, err)
	}
	for i, e := range errs[:len(corpus)] {
		if e != nil {
			t.Errorf("document %d: %v", i, e)
		}
	}
	if e := errs[len(corpus)]; !errors.Is(e, mongox.ErrDuplicate) {
		t.Errorf("a taken _id: %v, want ErrDuplicate", e)
	}
	for i, d := range corpus {
		var got bson.Raw
		if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: d[0].Value}}).Decode(&got); err != nil {
			t.Fatalf("find %v: %v", d[0].Value, err)
		}
		if !bsonEqual(got, raws[i]) {
			t.Errorf("%v read back as\n %s\nwant %s", d[0].Value, got, raws[i])
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: "seq", Value: int32(0)}}); err != nil || n != 1 {
		t.Errorf("a filtered scan found %d (%v), want the job", n, err)
	}
	var taken bson.M
	if err := coll.FindOne(ctx, bson.D{{Key: "_id", Value: "taken"}}).Decode(&taken); err != nil || taken["n"] != nil {
		t.Errorf("the taken _id's document: %v (%v), want the first one", taken, err)
	}

	// A unique secondary index refuses a document alone, as the _id's
	// does; a cancelled call stores nothing.
	if _, err := coll.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "u", Value: 1}}, Options: options.Index().SetUnique(true)}); err != nil {
		t.Fatal(err)
	}
	u1 := must(bson.Marshal(bson.D{{Key: "_id", Value: "u1"}, {Key: "u", Value: "same"}}))
	u2 := must(bson.Marshal(bson.D{{Key: "_id", Value: "u2"}, {Key: "u", Value: "same"}}))
	if errs, served, err := m.InsertDocs(ctx, "ins", "docs", []bson.Raw{u1, u2}); err != nil || !served || errs[0] != nil || !errors.Is(errs[1], mongox.ErrDuplicate) {
		t.Fatalf("a unique secondary index: %v, %v, %v; want the second refused alone", errs, served, err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := m.InsertDocs(cancelled, "ins", "docs", []bson.Raw{must(bson.Marshal(bson.D{{Key: "_id", Value: "never"}}))}); err == nil {
		t.Fatal("a cancelled insert succeeded")
	}
	if n, _ := coll.CountDocuments(ctx, bson.D{{Key: "_id", Value: "never"}}); n != 0 {
		t.Fatal("a cancelled insert stored its document")
	}

	before, _ := coll.CountDocuments(ctx, bson.D{})
	bad := must(bson.Marshal(bson.D{{Key: "_id", Value: "neg"}, {Key: "f", Value: math.Copysign(0, -1)}}))
	ok := must(bson.Marshal(bson.D{{Key: "_id", Value: "fine"}}))
	if errs, served, err := m.InsertDocs(ctx, "ins", "docs", []bson.Raw{ok, bad}); served || errs != nil || err != nil {
		t.Fatalf("a document FerretDB would change: %v, %v, %v; want it not served", errs, served, err)
	}
	huge := must(bson.Marshal(bson.D{{Key: "_id", Value: "huge"}, {Key: "s", Value: strings.Repeat("x", maxDocumentSize)}}))
	if _, served, err := m.InsertDocs(ctx, "ins", "docs", []bson.Raw{huge}); served || err != nil {
		t.Fatalf("a document over 16 MiB: served %v, %v; want it left to the driver, which refuses it", served, err)
	}
	for _, w := range [][2]string{{"ins", "nosuch"}, {"nodb", "docs"}} {
		if _, served, err := m.InsertDocs(ctx, w[0], w[1], []bson.Raw{ok}); served || err != nil {
			t.Fatalf("%s.%s: served %v, %v; want it left to FerretDB", w[0], w[1], served, err)
		}
	}
	if after, _ := coll.CountDocuments(ctx, bson.D{}); after != before {
		t.Fatalf("%d documents after unserved inserts, want %d", after, before)
	}
	// Dropped: FerretDB makes it again.
	if err := coll.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, served, err := m.InsertDocs(ctx, "ins", "docs", []bson.Raw{ok}); served || err != nil {
		t.Fatalf("a dropped collection: served %v, %v; want it left to FerretDB", served, err)
	}
}

// bsonEqual reports whether a and b are the same document, byte for byte.
func bsonEqual(a, b bson.Raw) bool { return bytes.Equal(a, b) }

// TestEmbeddedMongoReplacesDocs: ReplaceDoc stores, byte for byte, what
// FerretDB's own replace by _id stores for the same document (each of the
// corpus written over a smaller one), and FerretDB reads it back as given;
// a missing _id, or a string spelling a document's ObjectID or binary
// _id, matches nothing and writes nothing; a unique secondary index refuses it
// (mongox.ErrDuplicate); a cancelled call changes nothing; what it cannot
// write as FerretDB would, a collection or database FerretDB has not made,
// and a capped collection, are not served; once stopped, an outage.
func TestEmbeddedMongoReplacesDocs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	m, client := StartPrivate(t, dir)
	db := client.Database("rep")
	byFerret, direct := db.Collection("byferret"), db.Collection("direct")
	corpus := sjsonCorpus()
	for _, coll := range []*mongo.Collection{byFerret, direct} {
		for _, d := range corpus {
			if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: d[0].Value}, {Key: "old", Value: "x"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, d := range corpus {
		if res, err := byFerret.ReplaceOne(ctx, bson.D{{Key: "_id", Value: d[0].Value}}, d); err != nil || res.MatchedCount != 1 {
			t.Fatalf("FerretDB's replace of %v: %v, %v", d[0].Value, res, err)
		}
		matched, served, err := m.ReplaceDoc(ctx, "rep", "direct", must(bson.Marshal(d)))
		if err != nil || !served || !matched {
			t.Fatalf("ReplaceDoc(%v) = %v, %v, %v; want matched and served", d[0].Value, matched, served, err)
		}
	}
	sdb := openDBFile(t, dir, "rep", "mode=ro")
	stored := func(coll string) map[string]string {
		rows, err := sdb.Query(`SELECT _ferretdb_sjson->>'$._id', _ferretdb_sjson FROM ` + quoteIdent(tableName(t, sdb, coll)))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var id, text string
			if err := rows.Scan(&id, &text); err != nil {
				t.Fatal(err)
			}
			out[id] = text
		}
		return out
	}
	want, got := stored("byferret"), stored("direct")
	if len(want) != len(corpus) || len(got) != len(corpus) {
		t.Fatalf("%d and %d documents stored, want %d each", len(want), len(got), len(corpus))
	}
	for id, text := range want {
		if got[id] != text {
			t.Errorf("%s:\n got %s\nwant %s", id, got[id], text)
		}
	}
	for _, d := range corpus {
		var back bson.Raw
		if err := direct.FindOne(ctx, bson.D{{Key: "_id", Value: d[0].Value}}).Decode(&back); err != nil {
			t.Fatal(err)
		}
		if !bsonEqual(back, must(bson.Marshal(d))) {
			t.Errorf("%v read back as %s", d[0].Value, back)
		}
	}

	// FerretDB spells binary data in base64: this _id's key is "1234".
	binID := bson.Binary{Data: []byte{0xd7, 0x6d, 0xf8}}
	if _, err := direct.InsertOne(ctx, bson.D{{Key: "_id", Value: binID}}); err != nil {
		t.Fatal(err)
	}
	count := func() int64 { return must(direct.CountDocuments(ctx, bson.D{})) }
	n := count()
	oid := corpus[1][0].Value.(bson.ObjectID)
	for _, id := range []any{"missing", oid.Hex(), "1234"} {
		matched, served, err := m.ReplaceDoc(ctx, "rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "new", Value: true}})))
		if matched || !served || err != nil {
			t.Fatalf("ReplaceDoc(%v) = %v, %v, %v; want no match, served", id, matched, served, err)
		}
	}
	if count() != n {
		t.Fatal("a replace that matched nothing stored a document")
	}
	if m := must(direct.CountDocuments(ctx, bson.D{{Key: "_id", Value: binID}})); m != 1 {
		t.Fatal("a string spelling a binary _id replaced its document")
	}
	if _, err := direct.Indexes().CreateOne(ctx, mongo.IndexModel{Keys: bson.D{{Key: "u", Value: 1}}, Options: options.Index().SetUnique(true).SetSparse(true)}); err != nil {
		t.Fatal(err)
	}
	for i, id := range []any{"all-types", oid} {
		_, _, err := m.ReplaceDoc(ctx, "rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "u", Value: "same"}})))
		if (i == 0) != (err == nil) || i == 1 && !errors.Is(err, mongox.ErrDuplicate) {
			t.Fatalf("unique index, document %d: %v; want the second refused with ErrDuplicate", i, err)
		}
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := m.ReplaceDoc(cancelled, "rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: oid}, {Key: "c", Value: 1}}))); err == nil {
		t.Fatal("a cancelled replace succeeded")
	}
	var kept bson.Raw
	if err := direct.FindOne(ctx, bson.D{{Key: "_id", Value: oid}}).Decode(&kept); err != nil || !bsonEqual(kept, must(bson.Marshal(corpus[1]))) {
		t.Fatalf("after a cancelled replace and a refused one: %s (%v), want it unchanged", kept, err)
	}

	if err := db.CreateCollection(ctx, "capped", options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("capped").InsertOne(ctx, bson.D{{Key: "_id", Value: "c"}}); err != nil {
		t.Fatal(err)
	}
	doc := must(bson.Marshal(bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: 1}}))
	for _, w := range []struct {
		db, coll string
		doc      bson.Raw
	}{
		{"rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: "all-types"}, {Key: "z", Value: math.Copysign(0, -1)}}))},
		{"rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: int32(1)}}))},
		{"rep", "direct", must(bson.Marshal(bson.D{{Key: "_id", Value: "all-types"}, {Key: "s", Value: strings.Repeat("x", maxDocumentSize)}}))},
		{"rep", "nosuch", doc}, {"nodb", "direct", doc}, {"rep", "capped", doc},
	} {
		if matched, served, err := m.ReplaceDoc(ctx, w.db, w.coll, w.doc); matched || served || err != nil {
			t.Fatalf("%s.%s: %v, %v, %v; want it left to FerretDB", w.db, w.coll, matched, served, err)
		}
	}
	if err := direct.FindOne(ctx, bson.D{{Key: "_id", Value: "all-types"}}).Decode(&kept); err != nil || !bsonEqual(kept, must(bson.Marshal(bson.D{{Key: "_id", Value: "all-types"}, {Key: "u", Value: "same"}}))) {
		t.Fatalf("after unserved replaces: %s (%v)", kept, err)
	}

	_ = client.Disconnect(ctx)
	m.Stop()
	if _, _, err := m.ReplaceDoc(ctx, "rep", "direct", doc); outage.Find(err) == nil {
		t.Fatalf("ReplaceDoc after Stop: %v, want an outage of the database", err)
	}
}

// TestDirectWritesFollowTheCatalogue: the direct writes keep their
// statements prepared and what they last read of FerretDB's catalogue,
// and still follow it: a collection dropped and made again capped, then
// again plain, and one renamed, are written as FerretDB has them now.
func TestDirectWritesFollowTheCatalogue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client := StartPrivate(t, t.TempDir())
	db := client.Database("cat")
	doc := func(id string) bson.Raw {
		return must(bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "n", Value: 1}}))
	}
	insert := func(coll, id string) bool {
		t.Helper()
		errs, served, err := m.InsertDocs(ctx, "cat", coll, []bson.Raw{doc(id)})
		if err != nil || served && errs[0] != nil {
			t.Fatalf("InsertDocs(%s, %s): %v %v", coll, id, errs, err)
		}
		return served
	}
	replace := func(coll, id string) (matched, served bool) {
		t.Helper()
		matched, served, err := m.ReplaceDoc(ctx, "cat", coll, doc(id))
		if err != nil {
			t.Fatalf("ReplaceDoc(%s, %s): %v", coll, id, err)
		}
		return matched, served
	}
	coll := db.Collection("recycled")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "first"}}); err != nil {
		t.Fatal(err)
	}
	if !insert("recycled", "a") {
		t.Fatal("a plain collection: not served")
	}
	if matched, served := replace("recycled", "a"); !matched || !served {
		t.Fatal("a plain collection: the replace not served or not matched")
	}
	if err := coll.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCollection(ctx, "recycled", options.CreateCollection().SetCapped(true).SetSizeInBytes(1<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if insert("recycled", "b") {
		t.Fatal("made again capped: an insert was served")
	}
	if _, served := replace("recycled", "a"); served {
		t.Fatal("made again capped: a replace was served")
	}
	if err := coll.Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if !insert("recycled", "c") {
		t.Fatal("made again plain: not served")
	}
	if matched, served := replace("recycled", "a"); !matched || !served {
		t.Fatal("made again plain: the replace not served or not matched")
	}
	if n := must(coll.CountDocuments(ctx, bson.D{})); n != 2 {
		t.Fatalf("made again plain: %d documents, want 2", n)
	}

	// Renamed: the old name holds nothing, the new one the documents.
	if err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "renameCollection", Value: "cat.recycled"}, {Key: "to", Value: "cat.renamed"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if matched, served := replace("recycled", "a"); matched || served {
		t.Fatalf("the old name after a rename: matched %v, served %v; want it left to FerretDB", matched, served)
	}
	if matched, served := replace("renamed", "a"); !matched || !served {
		t.Fatal("the new name after a rename: the replace not served or not matched")
	}
	if !insert("renamed", "d") {
		t.Fatal("the new name after a rename: an insert not served")
	}
	if n := must(db.Collection("renamed").CountDocuments(ctx, bson.D{})); n != 3 {
		t.Fatalf("renamed: %d documents, want 3", n)
	}
}

// BenchmarkEncodeSJSON encodes a document shaped as an analysis job's
// (21 fields, an outbox entry with a payload): `go test -bench
// EncodeSJSON ./libs/testkit/`.
func BenchmarkEncodeSJSON(b *testing.B) {
	d := bson.D{{Key: "_id", Value: "01a22279-c858-72da-9f08-d272cd641010"}}
	for _, k := range []string{"root_id", "parent_id", "type", "status", "tenant", "project", "title", "query",
		"response_type", "tool", "args", "output", "error", "attempts", "version", "claim_owner", "trace_id",
		"idempotency_key", "plan"} {
		d = append(d, bson.E{Key: k, Value: "a value of moderate length for " + k})
	}
	d = append(d, bson.E{Key: "create_time", Value: bson.NewDateTimeFromTime(time.Unix(1764331200, 0))},
		bson.E{Key: "outbox", Value: bson.A{bson.D{{Key: "id", Value: "e1"}, {Key: "subject", Value: "am.evt.acme.job.x"},
			{Key: "data", Value: bson.Binary{Data: make([]byte, 600)}}}}})
	raw, err := bson.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := encodeSJSON(raw); !ok {
			b.Fatal("not encoded")
		}
	}
}
