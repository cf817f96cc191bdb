package jobstore

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

func TestScratchSQL(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+t.TempDir()+"/x.db")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE "t" (_ferretdb_sjson TEXT NOT NULL CHECK(_ferretdb_sjson != '')) STRICT`,
		`CREATE UNIQUE INDEX "t__id_" ON "t" (_ferretdb_sjson->"_id")`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	doc := func(i int) string {
		return fmt.Sprintf(`{"$s":{"p":{"_id":{"t":"string"},"a":{"t":"string"},"b":{"t":"object","$s":{"p":{"x":{"t":"int"}}}}}},"_id":"id-%06d","a":%q,"b":{"x":1}}`, i, strings.Repeat(`{\"k\":1},`, 100))
	}
	for i := 0; i < 2000; i++ {
		if _, err := db.Exec(`INSERT INTO t VALUES (?)`, doc(i)); err != nil {
			t.Fatal(err)
		}
	}
	tm := func(name, q string, args ...any) {
		start := time.Now()
		for i := 0; i < 20; i++ {
			rows, err := db.Query(q, args...)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
			}
			rows.Close()
		}
		t.Logf("%s %v", name, time.Since(start)/20)
	}
	tm("select", `SELECT _ferretdb_sjson FROM t WHERE _ferretdb_sjson->'$._id' = ?`, `"id-000005"`)
	tm("update", `UPDATE t SET _ferretdb_sjson = ? WHERE _ferretdb_sjson->'$._id' = ?`, doc(5), `"id-000005"`)
	tm("select-nomatch", `SELECT _ferretdb_sjson FROM t WHERE _ferretdb_sjson->'$._id' = ?`, `"zzz"`)
}
