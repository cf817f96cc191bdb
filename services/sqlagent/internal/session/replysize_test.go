package session_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// TestLargeValuesFitTheReply: a read whose values are large (a blob, a
// document column) answers with a table a reply can carry — a value past
// 64 KiB cut and saying how long it was, rows past 8 MiB of values left
// out — and says so, instead of a reply over gRPC's 32 MiB that the
// gateway could only fail (it answered 429 "received message larger than
// max" before).
func TestLargeValuesFitTheReply(t *testing.T) {
	t.Parallel()
	sh := newShop(t)
	a := session.NewAgent(newStore(t, testkit.MongoDB(t)), sh.dbs, nil, newClock().opts())
	run := func(sql string) session.Reply {
		t.Helper()
		id := toConfirmUserSQL(t, a, sql)
		send(t, a, id, "yes", session.StageExecuteSQL)
		return send(t, a, id, "default", session.StageShowResults)
	}

	// One value of 200,000 characters (and one of 40 MB, which alone would
	// pass gRPC's limit).
	for _, n := range []int{100_000, 20_000_000} {
		r := run("SELECT hex(randomblob(" + itoa(n) + ")) AS big, 'small' AS small")
		big, _ := r.Result.Rows[0][0].(string)
		if len(big) > 70_000 || !strings.Contains(big, "[cut: "+itoa(2*n)+" bytes in all]") || r.Result.Rows[0][1] != "small" ||
			!strings.Contains(r.Text, "1 values longer than 64 KiB are shown cut") {
			t.Errorf("%d-byte blob: text %q, value of %d bytes ending %q; want it cut at 64 KiB saying its length", n, r.Text, len(big), big[max(0, len(big)-40):])
		}
		checkReplySize(t, r)
	}

	// 300 rows of 60,000 characters: 18 MB of values, more than a reply
	// shows.
	r := run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 300) SELECT n, hex(randomblob(30000)) AS v FROM r")
	if n := len(r.Result.Rows); n == 0 || n >= 300 || !r.Result.Truncated || !strings.Contains(r.Text, "larger than a reply holds") ||
		!strings.Contains(r.Text, "first "+itoa(n)+" rows") {
		t.Errorf("300 rows of 60 KB: %d rows shown, truncated %v, text %q; want the first rows that fit 8 MiB, saying so", n, r.Result.Truncated, r.Text)
	}
	checkReplySize(t, r)

	// Past the 64 MiB a result holds (connections.MaxResultBytes): 100
	// rows of 1 MiB, read up to the bound; and one row of 80 MB (a 60 MB
	// blob as base64), not at all.
	r = run("WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n+1 FROM r WHERE n < 100) SELECT n, hex(randomblob(524288)) AS v FROM r")
	if n := len(r.Result.Rows); n == 0 || n >= 64 || !r.Result.Truncated || !strings.Contains(r.Text, "pass the 64 MiB a result holds; here are its first "+itoa(n)+" rows") {
		t.Errorf("100 rows of 1 MiB: %d rows shown, truncated %v, text %q; want the rows within 64 MiB, saying so", n, r.Result.Truncated, r.Text)
	}
	checkReplySize(t, r)
	r = run("SELECT randomblob(60000000) AS b")
	if len(r.Result.Rows) != 0 || !r.Result.Truncated || !strings.Contains(r.Text, "first row alone passes the 64 MiB a result holds") {
		t.Errorf("one row of 80 MB: %d rows shown, text %q; want none, saying why", len(r.Result.Rows), r.Text)
	}
}

// checkReplySize fails if r's result holds more than 9 MiB of values:
// with the table's framing, far from gRPC's 32 MiB.
func checkReplySize(t *testing.T, r session.Reply) {
	t.Helper()
	total := 0
	for _, row := range r.Result.Rows {
		for _, v := range row {
			if s, ok := v.(string); ok {
				total += len(s)
			}
		}
	}
	if total > 9<<20 {
		t.Errorf("the reply's result holds %d bytes of values", total)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
