package safety_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// FuzzCheck holds Check to its contract on any text in every dialect: it
// never panics (it runs on what users and models write), it either accepts
// or refuses with a safety.Error, and what it accepts is a part of the
// text it was given, checked again to the same answer.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"SELECT 1", "select * from t where a = 'x;y' -- c", "WITH a AS (SELECT 1) SELECT * FROM a;",
		"[draft] the top customers", `"abcdefghijklmnopqrstuvwxyzé" is`, "SELECT $x$ ; $x$; DROP TABLE t",
		`SELECT U&"\0070g_sleep"(1)`, "SELECT /*!50000 1 */", "(SELECT 1) UNION (SELECT 2)", "VALUES (1)", "TABLE t",
		"SELECT E'\\''; DROP TABLE t; --'", "/* unterminated", "SELECT `a``b` FROM t", "SELECT x'41'",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		for _, d := range []safety.Dialect{safety.SQLite, safety.Postgres, safety.MySQL} {
			out, err := safety.Check(sql, d)
			if err != nil {
				var se *safety.Error
				if !errors.As(err, &se) || !errors.Is(err, safety.ErrRejected) || se.Reason == "" {
					t.Fatalf("%s: Check(%q) = %v, not a safety.Error with a reason", d, sql, err)
				}
				continue
			}
			if !strings.Contains(sql, out) || out == "" {
				t.Fatalf("%s: Check(%q) accepted %q, which is not part of the text", d, sql, out)
			}
			if again, err := safety.Check(out, d); err != nil || again != out {
				t.Fatalf("%s: Check(%q) accepted %q, which checks as %q, %v", d, sql, out, again, err)
			}
		}
	})
}
