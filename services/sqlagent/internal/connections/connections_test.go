package connections_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

func TestParse(t *testing.T) {
	t.Parallel()
	specs, err := connections.Parse("music=sqlite:/data/chinook.db; wh=postgres:postgres://u:secret@db:5432/wh?sslmode=disable\nkv=pgx:host=db user=u password=p")
	if err != nil {
		t.Fatal(err)
	}
	want := []connections.Spec{
		{Name: "music", Dialect: "sqlite", DSN: "/data/chinook.db"},
		{Name: "wh", Dialect: "postgres", DSN: "postgres://u:secret@db:5432/wh?sslmode=disable"},
		{Name: "kv", Dialect: "postgres", DSN: "host=db user=u password=p"},
	}
	if len(specs) != len(want) {
		t.Fatalf("got %d specs, want %d", len(specs), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(specs[i], want[i]) {
			t.Errorf("spec %d = %+v, want %+v", i, specs[i], want[i])
		}
	}
	// A PostgreSQL connection may name a read DSN, before or after its own.
	specs, err = connections.Parse("wh[read]=postgres:postgres://reader@db/wh; wh=postgres:postgres://writer@db/wh; ro[read]=pgx:host=db user=reader")
	if err != nil {
		t.Fatal(err)
	}
	wantRead := []connections.Spec{
		{Name: "wh", Dialect: "postgres", DSN: "postgres://writer@db/wh", ReadDSN: "postgres://reader@db/wh"},
		{Name: "ro", Dialect: "postgres", ReadDSN: "host=db user=reader"},
	}
	if len(specs) != len(wantRead) || !reflect.DeepEqual(specs, wantRead) {
		t.Fatalf("specs with read DSNs = %+v, want %+v", specs, wantRead)
	}
	// So may a MariaDB/MySQL one (driver mysql or mariadb).
	specs, err = connections.Parse("shop=mysql:w:pw@tcp(db:3306)/shop; shop[read]=mariadb:r:pw@tcp(db:3306)/shop")
	if err != nil {
		t.Fatal(err)
	}
	if want := (connections.Spec{Name: "shop", Dialect: "mysql", DSN: "w:pw@tcp(db:3306)/shop", ReadDSN: "r:pw@tcp(db:3306)/shop"}); len(specs) != 1 || !reflect.DeepEqual(specs[0], want) {
		t.Fatalf("MySQL specs = %+v, want %+v", specs, want)
	}
	// A MySQL DSN that cannot be used stops the start without echoing it.
	for _, dsn := range []string{"u:supersecret@tcp(db:3306", "u:supersecret@tcp(db:3306)/"} {
		_, err := connections.Open([]connections.Spec{{Name: "shop", Dialect: connections.MySQL, DSN: dsn}}, connections.Options{})
		if err == nil || strings.Contains(err.Error(), "supersecret") || !strings.Contains(err.Error(), "shop") {
			t.Errorf("Open(%q) = %v, want an error naming the connection, not the DSN", dsn, err)
		}
	}
	for _, bad := range []struct{ list, want string }{
		{"wh=mysql:u@tcp(db)/wh; wh[read]=postgres:x", "different drivers"},
		{"music[read]=sqlite:/x.db", "for PostgreSQL"},
		{"wh=postgres:a; wh[read]=sqlite:/x.db", "for PostgreSQL"},
		{"wh[read]=postgres:a; wh[read]=postgres:b", "named twice"},
		{"wh[write]=postgres:a", "connection 1"},
		{"music", "name=driver:dsn"},
		{"music=oracle:x", "unknown driver"},
		{"music=sqlite:", "name=driver:dsn"},
		{"a=sqlite:x;a=sqlite:y", "named twice"},
		{"bad name=sqlite:x", "connection 1"},
	} {
		_, err := connections.Parse(bad.list)
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("Parse(%q) = %v, want error mentioning %q", bad.list, err, bad.want)
		}
	}
	// The DSN never appears in an error.
	if _, err := connections.Parse("x=oracle:user/topsecret@db"); err == nil || strings.Contains(err.Error(), "topsecret") {
		t.Errorf("Parse error %v leaks or misses the DSN", err)
	}
}

func TestQueryChinook(t *testing.T) {
	t.Parallel()
	reg, _ := openMusic(t)
	ctx := context.Background()

	res, err := reg.Query(ctx, "music", "SELECT ArtistId, Name FROM Artist ORDER BY ArtistId", 3, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Truncated || len(res.Rows) != 3 || res.Columns[1] != "Name" || res.Rows[0][1] != "AC/DC" || res.Rows[0][0] != int64(1) {
		t.Fatalf("result = %+v, want 3 rows starting with AC/DC, truncated", res)
	}

	// SQLite's authorizer refuses a write that got past the token checker.
	if _, err := reg.Query(ctx, "music", "DELETE FROM Artist", 10, 5*time.Second); !errors.Is(err, connections.ErrRefused) || !strings.Contains(err.Error(), "DELETE") {
		t.Fatalf("DELETE through Query: %v, want ErrRefused naming DELETE", err)
	}
	res, err = reg.Query(ctx, "music", "SELECT count(*) FROM Artist", 10, 5*time.Second)
	if err != nil || res.Rows[0][0] != int64(275) {
		t.Fatalf("artists after refused delete = %v, %v; want 275", res, err)
	}

	schema, err := reg.SchemaText(ctx, "music")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Artist(ArtistId INTEGER, Name NVARCHAR(120))", "Track(TrackId INTEGER", "Invoice("} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}
	schemas, err := reg.Schemas(ctx, "music")
	if err != nil || len(schemas) != 1 || schemas[0] != "main" {
		t.Fatalf("Schemas = %v, %v; want [main]", schemas, err)
	}
	if _, err := reg.Query(ctx, "nope", "SELECT 1", 1, time.Second); !errors.Is(err, connections.ErrUnknown) {
		t.Fatalf("unknown connection: %v", err)
	}
	if _, err := reg.Query(ctx, "music", "SELECT nosuchcolumn FROM Artist", 1, time.Second); !errors.Is(err, connections.ErrQuery) || !strings.Contains(err.Error(), "nosuchcolumn") {
		t.Fatalf("bad column: %v, want ErrQuery naming the column", err)
	}
}

// The sample database is made once, queries like any configured one, and
// is never overwritten: a second start keeps what users changed.
func TestCreateSample(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub", "sample.db")
	spec, err := connections.CreateSample(path)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != connections.SampleName || spec.Dialect != connections.SQLite || spec.DSN != path {
		t.Fatalf("spec = %+v", spec)
	}
	if _, err := os.Stat(path + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	reg := openRegistry(t, spec)
	ctx := context.Background()
	res, err := reg.Query(ctx, spec.Name, `SELECT c.country, count(DISTINCT o.order_id), round(sum(i.quantity * i.unit_price), 2)
		FROM orders o JOIN customers c USING (customer_id) JOIN order_items i USING (order_id)
		WHERE o.status <> 'cancelled' GROUP BY c.country ORDER BY 3 DESC`, 100, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) < 3 || len(res.Columns) != 3 {
		t.Fatalf("revenue by country = %+v, want rows for several countries", res)
	}
	schema, err := reg.SchemaText(ctx, spec.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"customers(", "products(", "orders(", "order_items("} {
		if !strings.Contains(schema, table) {
			t.Errorf("schema lacks %s:\n%s", table, schema)
		}
	}

	if err := os.WriteFile(path, []byte("changed by the user"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := connections.CreateSample(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "changed by the user" {
		t.Error("CreateSample overwrote an existing file")
	}
}

// TestWriteTableSQLite: WRITE_DATA copies SQLite's stored values exactly
// (DATETIME text stays text, storage classes stay), with the declared
// column types, writes the whole result whatever the row limit, and a
// query the authorizer refuses writes nothing.
func TestWriteTableSQLite(t *testing.T) {
	t.Parallel()
	reg, db := openMusic(t)
	ctx := context.Background()
	n, err := reg.WriteTable(ctx, "music", "SELECT InvoiceId, InvoiceDate, Total, BillingState, Total * 2 AS doubled FROM Invoice", "inv_copy", connections.WriteCreate, 5*time.Second)
	if err != nil || n != 412 {
		t.Fatalf("WriteTable: %d, %v; want 412 rows", n, err)
	}
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var same int
	if err := own.QueryRowContext(ctx, `SELECT count(*) FROM Invoice i JOIN inv_copy c USING (InvoiceId)
		WHERE c.InvoiceDate IS i.InvoiceDate AND typeof(c.InvoiceDate) = typeof(i.InvoiceDate) AND c.Total IS i.Total
			AND typeof(c.Total) = typeof(i.Total) AND c.BillingState IS i.BillingState AND c.doubled = i.Total * 2`).Scan(&same); err != nil || same != 412 {
		t.Fatalf("%d of 412 rows copied exactly, %v", same, err)
	}
	var types string
	if err := own.QueryRowContext(ctx, `SELECT group_concat(type, ',') FROM pragma_table_info('inv_copy')`).Scan(&types); err != nil || types != "INTEGER,DATETIME,NUMERIC(10,2),NVARCHAR(40)," {
		t.Fatalf("declared types %q, %v", types, err)
	}
	if _, err := reg.WriteTable(ctx, "music", "SELECT * FROM pragma_database_list", "paths", connections.WriteCreate, 5*time.Second); !errors.Is(err, connections.ErrRefused) {
		t.Fatalf("WriteTable of a refused query: %v, want ErrRefused", err)
	}
	var tables int
	if err := own.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'paths'`).Scan(&tables); err != nil || tables != 0 {
		t.Fatalf("table paths: %d, %v; want never created", tables, err)
	}
}

// TestConcurrentWritesToOneSQLiteFile: WRITE_DATA jobs that write to the
// same SQLite file at the same time take turns and all succeed. (SQLite
// fails at once, without calling the busy handler, when two deferred
// transactions that both read want to write: each would wait for the other.)
func TestConcurrentWritesToOneSQLiteFile(t *testing.T) {
	t.Parallel()
	reg, db := openMusic(t)
	ctx := context.Background()
	const jobs = 4
	errs := make([]error, jobs)
	counts := make([]int64, jobs)
	var wg sync.WaitGroup
	for i := range jobs {
		wg.Go(func() {
			counts[i], errs[i] = reg.WriteTable(ctx, "music", "SELECT InvoiceId, Total FROM Invoice", fmt.Sprintf("copy_%d", i), connections.WriteCreate, 30*time.Second)
		})
	}
	wg.Wait()
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	for i := range jobs {
		if errs[i] != nil || counts[i] != 412 {
			t.Errorf("job %d: %d rows, %v; want 412", i, counts[i], errs[i])
			continue
		}
		var n int
		if err := own.QueryRowContext(ctx, fmt.Sprintf("SELECT count(*) FROM copy_%d", i)).Scan(&n); err != nil || n != 412 {
			t.Errorf("copy_%d holds %d rows, %v; want 412", i, n, err)
		}
	}
}

// openMusic opens a registry whose one connection, "music", is a copy of
// the Chinook SQLite database, and returns it with the copy's path.
func openMusic(t *testing.T) (*connections.Registry, string) {
	t.Helper()
	db := connections.ChinookCopy(t)
	reg := openRegistry(t, connections.Spec{Name: "music", Dialect: "sqlite", DSN: db})
	return reg, db
}

// openRegistry opens a registry of specs with the default options, closed
// when the test ends.
func openRegistry(t *testing.T, specs ...connections.Spec) *connections.Registry {
	t.Helper()
	reg, err := connections.Open(specs, connections.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	return reg
}

// checkSchemaNames fails the test if the schema text of connection conn
// names any of absent or leaves out any of present.
func checkSchemaNames(t *testing.T, reg *connections.Registry, conn string, absent, present []string) {
	t.Helper()
	text, err := reg.SchemaText(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range absent {
		if strings.Contains(text, name) {
			t.Errorf("the schema lists %s", name)
		}
	}
	for _, name := range present {
		if !strings.Contains(text, name) {
			t.Errorf("the schema leaves out %s", name)
		}
	}
}

// TestTextThatIsNotUTF8: SQLite keeps whatever bytes a TEXT value (or a
// column name) was given, an application's Latin-1 say. A result shows
// them with U+FFFD for each byte that is not UTF-8 (its rows travel as
// protobuf strings: the job failed with an internal error), and a result
// written to a table copies the bytes as stored.
func TestTextThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	reg, db := openMusic(t)
	ctx := context.Background()
	own, err := sql.Open("sqlite", db)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if _, err := own.ExecContext(ctx, "CREATE TABLE latin (\"caf\xe9\" TEXT); INSERT INTO latin VALUES (CAST(x'6372e86d65' AS TEXT))"); err != nil {
		t.Fatal(err)
	}
	res, err := reg.Query(ctx, "music", "SELECT *, CAST(x'C328' AS TEXT) AS cut FROM latin", 10, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"caf\uFFFD", "cut"}; !reflect.DeepEqual(res.Columns, want) {
		t.Errorf("columns %q, want %q", res.Columns, want)
	}
	if want := [][]any{{"cr\uFFFDme", "\uFFFD("}}; !reflect.DeepEqual(res.Rows, want) {
		t.Errorf("rows %q, want %q", res.Rows, want)
	}
	if _, err := reg.WriteTable(ctx, "music", "SELECT * FROM latin", "latin_copy", connections.WriteCreate, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var same int
	if err := own.QueryRowContext(ctx, "SELECT count(*) FROM latin_copy WHERE CAST(\"caf\xe9\" AS BLOB) = x'6372e86d65'").Scan(&same); err != nil || same != 1 {
		t.Fatalf("copied bytes: %d rows the same, %v", same, err)
	}
	// The schema the model is shown, which travels to it as a protobuf
	// string, names the column as the results do.
	schema, err := reg.Schema(ctx, "music", connections.SchemaRequest{Question: "latin"})
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(schema.Text) || !strings.Contains(schema.Text, "caf\uFFFD") {
		t.Errorf("schema text not valid UTF-8, or without the column: %q", schema.Text)
	}
}
