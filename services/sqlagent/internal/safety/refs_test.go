package safety_test

import (
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// TestRefs checks the names an engine-side check is given: calls and
// other names, qualified or not, bare words upper-cased, both readings of
// a version-gated comment, and variables noticed.
func TestRefs(t *testing.T) {
	t.Parallel()
	render := func(refs []safety.Ref) string {
		var parts []string
		for _, r := range refs {
			s := r.Name
			if r.Schema != "" {
				s = r.Schema + "." + s
			}
			if r.Call {
				s += "()"
			}
			if r.Word != "" {
				s += "/w"
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, " ")
	}
	cases := []struct{ sql, want string }{
		{"SELECT f(x) FROM db.v", "SELECT/w f()/w x/w FROM/w db.v"},
		{"SELECT `db`.`f`(1)", "SELECT/w db.f()"},
		{"SELECT a.b.c", "SELECT/w b.c"},
		{"SELECT GET_LOCK /*!99999 x */ ('a', 0)", "SELECT/w GET_LOCK/w x()/w SELECT/w GET_LOCK()/w"},
		// A common table expression's column list is no call.
		{"WITH RECURSIVE c(n) AS (SELECT 1) SELECT n FROM c", "WITH/w RECURSIVE/w c/w n/w AS()/w SELECT/w SELECT/w n/w FROM/w c/w"},
		{"WITH a (x) AS (SELECT f(1)), b(y) AS (SELECT 2) SELECT g(x) AS y FROM a", "WITH/w a/w x/w AS()/w SELECT/w f()/w b/w y/w AS()/w SELECT/w SELECT/w g()/w x/w AS/w y/w FROM/w a/w"},
	}
	for _, tc := range cases {
		refs, vars, err := safety.Refs(tc.sql, safety.MySQL)
		if err != nil || vars || render(refs) != tc.want {
			t.Errorf("Refs(%q) = %s, %v, %v; want %s", tc.sql, render(refs), vars, err, tc.want)
		}
	}
	for _, sql := range []string{"SELECT @x := 1", "SELECT @@global.x", "SELECT ?"} {
		if _, vars, err := safety.Refs(sql, safety.MySQL); err != nil || !vars {
			t.Errorf("Refs(%q) noticed no variable (%v)", sql, err)
		}
	}
	if _, _, err := safety.Refs("SELECT 'a\\'b'", safety.MySQL); err == nil {
		t.Error("Refs read an ambiguous string")
	}
}
