package session

import (
	"fmt"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// Row statuses in a comparison's table.
const (
	statusOnlyFirst  = "only_in_first"
	statusOnlySecond = "only_in_second"
	statusChanged    = "changed"
	statusSame       = "same"
)

// diffColumn is the status column of a comparison's table.
const diffColumn = "diff_status"

// comparison is the diff of two results.
type comparison struct {
	// Columns and Rows are the table to write: full and differences
	// reports hold diff_status, the key columns, then each other compared
	// column twice (<first name>_first, <second name>_second); without a
	// key, diff_status and the compared columns under the first query's
	// names. A summary holds diff_status and rows.
	Columns []string
	Rows    [][]any
	// Counts of rows by status.
	OnlyFirst, OnlySecond, Changed, Same int
}

// diff compares first and second on the mapped columns pairs. With keys
// (first-query names of mapped columns, unique in each result) rows are
// matched by key and a matched row whose other columns differ is changed;
// without, whole rows are matched as multisets (a row twice in the first
// and once in the second is once only in the first). Values are compared
// as what they denote across engines: numbers by value (5, 5.0 and
// "5.00" are equal), timestamps by instant, text exactly, NULL equal to
// NULL.
func diff(first, second *connections.Result, pairs []columnPair, keys []string, report string) (*comparison, error) {
	fi, si, err := pairIndexes(first, second, pairs)
	if err != nil {
		return nil, err
	}
	isKey := map[string]bool{}
	for _, k := range keys {
		isKey[k] = true
	}
	var keyAt, valAt []int // indexes into pairs
	for i, p := range pairs {
		if isKey[p.First] {
			keyAt = append(keyAt, i)
		} else {
			valAt = append(valAt, i)
		}
	}
	if len(keyAt) != len(keys) {
		return nil, fmt.Errorf("a key column is not among the compared columns")
	}
	c := &comparison{}
	emit := func(status string, row []any) {
		switch status {
		case statusOnlyFirst:
			c.OnlyFirst++
		case statusOnlySecond:
			c.OnlySecond++
		case statusChanged:
			c.Changed++
		default:
			c.Same++
			if report != reportFull {
				return
			}
		}
		if report != reportSummary {
			c.Rows = append(c.Rows, append([]any{status}, row...))
		}
	}
	pick := func(row []any, idx []int, at []int) []any {
		out := make([]any, len(at))
		for i, a := range at {
			out[i] = row[idx[a]]
		}
		return out
	}
	if len(keyAt) == 0 {
		c.Columns = []string{diffColumn}
		for _, p := range pairs {
			c.Columns = append(c.Columns, p.First)
		}
		all := make([]int, len(pairs))
		for i := range all {
			all[i] = i
		}
		inSecond := map[string]int{}
		for _, r := range second.Rows {
			inSecond[rowKey(pick(r, si, all))]++
		}
		for _, r := range first.Rows {
			vals := pick(r, fi, all)
			k := rowKey(vals)
			if inSecond[k] > 0 {
				inSecond[k]--
				emit(statusSame, vals)
				continue
			}
			emit(statusOnlyFirst, vals)
		}
		for _, r := range second.Rows {
			vals := pick(r, si, all)
			if k := rowKey(vals); inSecond[k] > 0 {
				inSecond[k]--
				emit(statusOnlySecond, vals)
			}
		}
	} else {
		c.Columns = []string{diffColumn}
		for _, a := range keyAt {
			c.Columns = append(c.Columns, pairs[a].First)
		}
		for _, a := range valAt {
			c.Columns = append(c.Columns, pairs[a].First+"_first", pairs[a].Second+"_second")
		}
		secondByKey := map[string][]any{}
		for _, r := range second.Rows {
			k := rowKey(pick(r, si, keyAt))
			if _, dup := secondByKey[k]; dup {
				return nil, fmt.Errorf("key %s is not unique in the second query (%s appears twice)", strings.Join(keys, ", "), showKey(pick(r, si, keyAt)))
			}
			secondByKey[k] = r
		}
		seen := map[string]bool{}
		both := func(a, b []any) []any {
			out := []any{}
			for _, v := range valAt {
				var x, y any
				if a != nil {
					x = a[fi[v]]
				}
				if b != nil {
					y = b[si[v]]
				}
				out = append(out, x, y)
			}
			return out
		}
		for _, r := range first.Rows {
			kv := pick(r, fi, keyAt)
			k := rowKey(kv)
			if seen[k] {
				return nil, fmt.Errorf("key %s is not unique in the first query (%s appears twice)", strings.Join(keys, ", "), showKey(kv))
			}
			seen[k] = true
			o, ok := secondByKey[k]
			switch {
			case !ok:
				emit(statusOnlyFirst, append(kv, both(r, nil)...))
			case rowKey(pick(r, fi, valAt)) == rowKey(pick(o, si, valAt)):
				emit(statusSame, append(kv, both(r, o)...))
			default:
				emit(statusChanged, append(kv, both(r, o)...))
			}
		}
		for _, r := range second.Rows {
			kv := pick(r, si, keyAt)
			if !seen[rowKey(kv)] {
				emit(statusOnlySecond, append(kv, both(nil, r)...))
			}
		}
	}
	if report == reportSummary {
		c.Columns = []string{diffColumn, "rows"}
		c.Rows = [][]any{
			{statusOnlyFirst, int64(c.OnlyFirst)}, {statusOnlySecond, int64(c.OnlySecond)},
			{statusChanged, int64(c.Changed)}, {statusSame, int64(c.Same)},
		}
	}
	return c, nil
}

// pairIndexes finds the mapped columns in both results.
func pairIndexes(first, second *connections.Result, pairs []columnPair) (fi, si []int, err error) {
	index := func(cols []string, name, which string) (int, error) {
		for i, c := range cols {
			if c == name {
				return i, nil
			}
		}
		return 0, fmt.Errorf("the %s query no longer has column %s", which, name)
	}
	for _, p := range pairs {
		a, err := index(first.Columns, p.First, "first")
		if err != nil {
			return nil, nil, err
		}
		b, err := index(second.Columns, p.Second, "second")
		if err != nil {
			return nil, nil, err
		}
		fi, si = append(fi, a), append(si, b)
	}
	return fi, si, nil
}

// rowKey is a string equal for two value lists exactly when their values
// are equal as diff compares them.
func rowKey(vals []any) string {
	var b strings.Builder
	for _, v := range vals {
		b.WriteString(canonical(v))
		b.WriteByte(0x1f)
	}
	return b.String()
}

func showKey(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ", ")
}

// numberRE is a decimal number as engines print one: no leading zeros, so
// a code such as "00123" stays text.
var numberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$`)

// timeLayouts are the ways the engines' drivers render dates and times:
// RFC 3339 (PostgreSQL's through the driver), and SQLite's and MariaDB's
// text.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02"}

// canonical renders a result value (nil, bool, int64, float64, string) so
// that values denoting the same number or instant render alike: a number
// as an exact fraction of its shortest decimal, a timestamp as UTC RFC
// 3339, text as itself, each tagged by kind.
func canonical(v any) string {
	switch x := v.(type) {
	case nil:
		return "∅"
	case bool:
		return "b" + strconv.FormatBool(x)
	case int64:
		return "n" + strconv.FormatInt(x, 10)
	case float64:
		return number(strconv.FormatFloat(x, 'g', -1, 64))
	case string:
		if numberRE.MatchString(x) {
			return number(x)
		}
		for _, l := range timeLayouts {
			if t, err := time.Parse(l, x); err == nil {
				return "t" + t.UTC().Format(time.RFC3339Nano)
			}
		}
		return "s" + x
	}
	return "s" + fmt.Sprint(v)
}

// number renders a decimal numeral as its exact value: an integer as
// itself, anything else as a reduced fraction.
func number(s string) string {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "s" + s
	}
	if r.IsInt() {
		return "n" + r.Num().String()
	}
	return "n" + r.RatString()
}
