package session

import (
	"fmt"

	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// A read job's reply carries its result table to the client, through gRPC
// and the REST gateway, whose messages hold at most 32 MiB: a few rows of
// large values (a blob, a document column) would otherwise make the reply
// fail as a whole. The table shown is bounded; the job's record, the
// written tables, comparisons and e-mailed CSVs read the query again and
// are not.
const (
	// replyResultBytes bounds the values of the table a reply shows: rows
	// past it are left out, as rows past the row limit are.
	replyResultBytes = 8 << 20
	// replyValueBytes bounds one value shown: a longer text is cut there
	// and says so.
	replyValueBytes = 64 << 10
)

// fitReply returns res as a reply shows it: values longer than
// replyValueBytes cut (how many is cutValues), and rows after those that
// fill replyResultBytes left out (full then says so, and the result is
// marked truncated). res is not changed.
func fitReply(res *connections.Result) (shown *connections.Result, cutValues int, full bool) {
	shown = &connections.Result{Columns: res.Columns, Rows: make([][]any, 0, len(res.Rows)), Truncated: res.Truncated}
	total := 0
	for _, row := range res.Rows {
		out, size, copied := row, 0, false
		for i, v := range row {
			s, ok := v.(string)
			if !ok {
				size += 8
				continue
			}
			if len(s) > replyValueBytes {
				if !copied {
					out, copied = append([]any(nil), row...), true
				}
				s = cutText(s, replyValueBytes)
				out[i] = s
				cutValues++
			}
			size += len(s)
		}
		if total+size > replyResultBytes && len(shown.Rows) > 0 {
			shown.Truncated, full = true, true
			break
		}
		total += size
		shown.Rows = append(shown.Rows, out)
	}
	return shown, cutValues, full
}

// cutText cuts s to at most n bytes at a character boundary and says how
// long it was.
func cutText(s string, n int) string {
	return fmt.Sprintf("%s… [cut: %d bytes in all]", utf8x.Prefix(s, n), len(s))
}
