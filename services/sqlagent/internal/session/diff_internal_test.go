package session

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// Values that denote the same thing compare equal however an engine's
// driver renders them (SQLite REAL, a PostgreSQL or MariaDB DECIMAL as
// text, timestamps as RFC 3339 or as SQLite and MariaDB text); different
// things never do.
func TestCanonicalValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		a, b  any
		equal bool
	}{
		{"integer and decimal text", int64(5), "5.00", true},
		{"float and decimal text", 0.99, "0.99", true},
		{"float and integer", 2.0, int64(2), true},
		{"big integers stay exact", int64(9007199254740993), "9007199254740992", false},
		{"PostgreSQL and SQLite timestamps", "2009-01-01T00:00:00Z", "2009-01-01 00:00:00", true},
		{"MariaDB date and PostgreSQL timestamp", "2009-01-01", "2009-01-01T00:00:00Z", true},
		{"different instants", "2009-01-01 00:00:01", "2009-01-01T00:00:00Z", false},
		{"a code with a leading zero is text", "00123", int64(123), false},
		{"text is exact", "Czech Republic", "czech republic", false},
		{"NULL equals NULL", nil, nil, true},
		{"NULL is not empty text", nil, "", false},
		{"NULL is not the text NULL", nil, "∅", false},
		{"bool is not text", true, "true", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := canonical(tc.a) == canonical(tc.b); got != tc.equal {
				t.Fatalf("canonical(%#v) == canonical(%#v) is %v (%q, %q)", tc.a, tc.b, got, canonical(tc.a), canonical(tc.b))
			}
		})
	}
}

func TestDiff(t *testing.T) {
	t.Parallel()
	first := &connections.Result{Columns: []string{"id", "name"}, Rows: [][]any{{int64(1), "a"}, {int64(2), "b"}, {int64(2), "b"}, {int64(3), "c"}}}
	second := &connections.Result{Columns: []string{"key", "label"}, Rows: [][]any{{"1", "a"}, {int64(2), "b"}, {int64(4), "d"}}}
	pairs := []columnPair{{"id", "key"}, {"name", "label"}}
	show := func(c *comparison) string {
		var rows []string
		for _, r := range c.Rows {
			vals := make([]string, len(r))
			for i, v := range r {
				vals[i] = fmt.Sprint(v)
			}
			rows = append(rows, strings.Join(vals, "|"))
		}
		return strings.Join(c.Columns, ",") + ": " + strings.Join(rows, "; ")
	}
	for _, tc := range []struct {
		name   string
		first  *connections.Result
		keys   []string
		report string
		want   string
		err    string
	}{
		{name: "whole rows, a duplicate counted as a multiset", first: first, report: reportDifferences,
			want: "diff_status,id,name: only_in_first|2|b; only_in_first|3|c; only_in_second|4|d"},
		{name: "whole rows, full", first: first, report: reportFull,
			want: "diff_status,id,name: same|1|a; same|2|b; only_in_first|2|b; only_in_first|3|c; only_in_second|4|d"},
		{name: "summary", first: first, report: reportSummary,
			want: "diff_status,rows: only_in_first|2; only_in_second|1; changed|0; same|2"},
		{name: "a key not unique in the first query", first: first, keys: []string{"id"}, report: reportDifferences,
			err: "not unique in the first query (2 appears twice)"},
		{name: "keyed, changed rows show both sides", keys: []string{"id"}, report: reportFull,
			first: &connections.Result{Columns: []string{"id", "name"}, Rows: [][]any{{int64(1), "a"}, {int64(2), "x"}, {int64(3), "c"}}},
			want:  "diff_status,id,name_first,label_second: same|1|a|a; changed|2|x|b; only_in_first|3|c|<nil>; only_in_second|4|<nil>|d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := diff(tc.first, second, pairs, tc.keys, tc.report)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if show(got) != tc.want {
				t.Fatalf("diff =\n  %s\nwant\n  %s", show(got), tc.want)
			}
		})
	}
}
