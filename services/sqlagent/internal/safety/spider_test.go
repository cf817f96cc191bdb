package safety_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// sharedData walks up from the package directory to the directory holding
// shared/data and returns that data directory, skipping the test when there
// is none (the data sits beside the repository, not in it).
func sharedData(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		candidate := filepath.Join(dir, "shared", "data")
		if st, err := os.Stat(candidate); err == nil && st.IsDir() {
			return candidate
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/data not found above the package directory; the Spider and Chinook data live in ../shared/data next to the repository")
		}
		dir = parent
	}
}

// spiderGold reads dev_gold.sql. It accepts both layouts the file comes in:
// "SQL<TAB>db_id" lines, and blocks of "Question N: ... ||| db_id" followed
// by "SQL: query".
func spiderGold(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(sharedData(t), "spider", "dev_gold.sql"))
	if err != nil {
		t.Skipf("Spider dev set not available: %v", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "SQL:"):
			out = append(out, strings.TrimSpace(strings.TrimPrefix(line, "SQL:")))
		case strings.HasPrefix(line, "Question"), strings.TrimSpace(line) == "":
		default:
			if sqlText, _, ok := strings.Cut(line, "\t"); ok {
				out = append(out, strings.TrimSpace(sqlText))
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAcceptsEverySpiderGoldQuery(t *testing.T) {
	t.Parallel()
	queries := spiderGold(t)
	if len(queries) != 1034 {
		t.Fatalf("read %d gold queries, want 1034", len(queries))
	}
	for _, d := range []safety.Dialect{safety.SQLite, safety.Postgres, safety.MySQL} {
		failed := 0
		for i, q := range queries {
			if _, err := safety.Check(q, d); err != nil {
				failed++
				if failed <= 10 {
					t.Errorf("%s: gold query %d rejected: %v\n  %s", d, i+1, err, q)
				}
			}
		}
		if failed > 0 {
			t.Errorf("%s: %d of %d gold queries rejected", d, failed, len(queries))
		}
	}
}
