package connections

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// SchemaRequest says what a schema is wanted for.
type SchemaRequest struct {
	// Question is the user's question. When the whole schema is longer
	// than the registry's MaxSchemaChars, the tables it names (in a
	// table's name, column names or comments) are shown, best first, with
	// the tables their foreign keys link one hop away.
	Question string
	// Hints, when set, is called only when the schema is too long for
	// the prompt: texts (a knowledge base's passages about the question)
	// in which the name of a table makes that table relevant. It must
	// return in bounded time; nil or empty: no hints.
	Hints func(ctx context.Context) []string
}

// Schema is the schema text given to the model and which tables it shows.
type Schema struct {
	// Text is one line per table: "table(col TYPE /* comment */, ...) --
	// table comment", then, when only some tables are shown, a line
	// saying so.
	Text string
	// Shown are the tables in Text, in its order.
	Shown []string
	// Total counts the connection's tables and views.
	Total int
	// Selected is true when the whole schema did not fit and only Shown
	// are in Text.
	Selected bool
	// ByQuestion and ByKnowledge say what picked the shown tables: words
	// of the question, a hint naming the table. Neither, when Selected:
	// nothing matched, and Shown are the first tables by name.
	ByQuestion, ByKnowledge bool
}

// Note is the sentence telling the user which tables the model was shown,
// "" when it was shown the whole schema.
func (s *Schema) Note() string {
	if !s.Selected {
		return ""
	}
	how := "none matched the question, so the first by name"
	switch {
	case s.ByQuestion && s.ByKnowledge:
		how = "picked by the question and the knowledge base"
	case s.ByQuestion:
		how = "picked by the question"
	case s.ByKnowledge:
		how = "picked by the knowledge base"
	}
	return fmt.Sprintf("Shown to the model: %s (%d of %d tables, %s).", strings.Join(s.Shown, ", "), len(s.Shown), s.Total, how)
}

// SchemaText is the named connection's schema as Schema gives it for no
// question: all of it when it fits MaxSchemaChars, else the first tables
// by name that do.
func (r *Registry) SchemaText(ctx context.Context, name string) (string, error) {
	s, err := r.Schema(ctx, name, SchemaRequest{})
	if err != nil {
		return "", err
	}
	return s.Text, nil
}

// Schema describes the named connection's tables for a prompt about
// req.Question: every table when the whole text fits the registry's
// MaxSchemaChars; otherwise the tables most relevant to the question
// (SchemaRequest) that fit, or, when none is, the first by name. Errors
// are ErrUnknown and ErrUnavailable.
func (r *Registry) Schema(ctx context.Context, name string, req SchemaRequest) (*Schema, error) {
	c, err := r.get(name)
	if err != nil {
		return nil, err
	}
	tables, err := c.catalog(ctx)
	if err != nil {
		return nil, err
	}
	lines := make([]string, len(tables))
	size := 0
	for i, t := range tables {
		lines[i] = t.line()
		size += len(lines[i])
	}
	s := &Schema{Total: len(tables)}
	if size <= r.opts.MaxSchemaChars {
		s.Text = strings.Join(lines, "")
		for _, t := range tables {
			s.Shown = append(s.Shown, t.name)
		}
		return s, nil
	}
	var hints []string
	if req.Hints != nil {
		hints = req.Hints(ctx)
	}
	scores, byQuestion, byHints := relevance(tables, req.Question, hints)
	order := make([]int, 0, len(tables))
	for i := range tables {
		if scores[i] > 0 {
			order = append(order, i)
		}
	}
	note := "-- (only %d of %d tables are shown: those the question or the knowledge base names, and the tables their foreign keys link)\n"
	if len(order) == 0 {
		note = "-- (only %d of %d tables are shown: the first by name; none matched the question)\n"
		for i := range tables {
			order = append(order, i)
		}
		sort.SliceStable(order, func(a, b int) bool { return tables[order[a]].name < tables[order[b]].name })
	} else {
		sort.SliceStable(order, func(a, b int) bool {
			x, y := order[a], order[b]
			if scores[x] != scores[y] {
				return scores[x] > scores[y]
			}
			return tables[x].name < tables[y].name
		})
	}
	// Best first while the budget lasts; a table too long for what is
	// left gives way to shorter ones after it. The best one is shown even
	// when it alone is too long, cut to the budget.
	budget := r.opts.MaxSchemaChars
	var b strings.Builder
	for n, i := range order {
		line := lines[i]
		if len(line) > budget {
			if n > 0 {
				continue
			}
			line = utf8x.Prefix(line, budget) + " …)\n"
		}
		budget -= len(line)
		b.WriteString(line)
		s.Shown = append(s.Shown, tables[i].name)
		s.ByQuestion = s.ByQuestion || byQuestion[i]
		s.ByKnowledge = s.ByKnowledge || byHints[i]
	}
	b.WriteString(fmt.Sprintf(note, len(s.Shown), len(tables)))
	s.Text, s.Selected = b.String(), true
	return s, nil
}

// Weights of a question term matched in a table's name, a column name or
// a comment (times the term's rarity across the tables), of a knowledge
// base passage naming the table, and the share of a picked table's score
// its foreign-key neighbours get.
const (
	nameWeight, columnWeight, commentWeight = 3.0, 1.0, 1.0
	hintWeight                              = 6.0
	linkShare                               = 0.5
)

// relevance scores each table for question and hints; byQuestion[i] and
// byHints[i] say what gave table i its own score (a neighbour's share
// counts as the neighbour's).
func relevance(tables []*table, question string, hints []string) (scores []float64, byQuestion, byHints []bool) {
	q := terms(question)
	type fields struct{ name, columns, comments map[string]bool }
	fs := make([]fields, len(tables))
	df := map[string]int{}
	for i, t := range tables {
		f := fields{name: terms(baseName(t.name)), columns: map[string]bool{}, comments: terms(t.comment)}
		f.name[stem(strings.ToLower(strings.Map(keepAlnum, baseName(t.name))))] = true
		for _, c := range t.columns {
			for w := range terms(c.name) {
				f.columns[w] = true
			}
			for w := range terms(c.comment) {
				f.comments[w] = true
			}
		}
		seen := map[string]bool{}
		for _, m := range []map[string]bool{f.name, f.columns, f.comments} {
			for w := range m {
				if q[w] && !seen[w] {
					seen[w] = true
					df[w]++
				}
			}
		}
		fs[i] = f
	}
	// A word most tables carry (id, name, created) says little about
	// which table is meant.
	idf := func(w string) float64 { return math.Log(1 + float64(len(tables))/float64(df[w])) }
	lowered := make([]string, len(hints))
	for i, h := range hints {
		lowered[i] = strings.ToLower(h)
	}
	own := make([]float64, len(tables))
	byQuestion, byHints = make([]bool, len(tables)), make([]bool, len(tables))
	for i, f := range fs {
		for w := range q {
			if f.name[w] {
				own[i] += nameWeight * idf(w)
			}
			if f.columns[w] {
				own[i] += columnWeight * idf(w)
			}
			if f.comments[w] {
				own[i] += commentWeight * idf(w)
			}
		}
		byQuestion[i] = own[i] > 0
		if named(lowered, tables[i].name) {
			own[i] += hintWeight
			byHints[i] = true
		}
	}
	index := map[string]int{}
	for i, t := range tables {
		index[t.name] = i
	}
	scores = append([]float64(nil), own...)
	for i, t := range tables {
		if own[i] == 0 {
			continue
		}
		for _, l := range t.links {
			if j, ok := index[l]; ok && own[j] == 0 {
				scores[j] = max(scores[j], own[i]*linkShare)
			}
		}
	}
	return scores, byQuestion, byHints
}

// named reports whether one of the lower-cased texts names table: its name,
// or its unqualified name, as a whole word. Names shorter than three
// characters are too common in prose to count.
func named(texts []string, table string) bool {
	names := []string{strings.ToLower(table)}
	if base := strings.ToLower(baseName(table)); base != names[0] {
		names = append(names, base)
	}
	for _, n := range names {
		if utf8.RuneCountInString(n) < 3 {
			continue
		}
		for _, t := range texts {
			if containsWord(t, n) {
				return true
			}
		}
	}
	return false
}

// containsWord reports whether w occurs in s with no letter, digit or
// underscore right before or after it.
func containsWord(s, w string) bool {
	for from := 0; from < len(s); {
		i := strings.Index(s[from:], w)
		if i < 0 {
			return false
		}
		i += from
		before, _ := utf8.DecodeLastRuneInString(s[:i])
		after, _ := utf8.DecodeRuneInString(s[i+len(w):])
		if !identRune(before) && !identRune(after) {
			return true
		}
		from = i + 1
	}
	return false
}

func identRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)
}

func keepAlnum(r rune) rune {
	if unicode.IsLetter(r) || unicode.IsDigit(r) {
		return r
	}
	return -1
}

// baseName is a table's name without its schema.
func baseName(table string) string {
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		return table[i+1:]
	}
	return table
}

// terms are the words of s, split at anything but letters and digits and
// at camelCase humps, lower-cased and stemmed, without stop words.
func terms(s string) map[string]bool {
	out := map[string]bool{}
	for _, w := range words(s) {
		w = stem(strings.ToLower(w))
		if utf8.RuneCountInString(w) >= 2 && !stopWords[w] {
			out[w] = true
		}
	}
	return out
}

// words splits s into words: runs of letters and digits, broken where a
// lower-case letter or digit meets an upper-case one (orderItems) and
// before the last capital of a run followed by a lower-case letter
// (HTTPServer: HTTP, Server).
func words(s string) []string {
	var out []string
	rs := []rune(s)
	start := -1
	for i, r := range rs {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			if start >= 0 {
				out = append(out, string(rs[start:i]))
				start = -1
			}
			continue
		}
		if start >= 0 && unicode.IsUpper(r) {
			prev := rs[i-1]
			if unicode.IsLower(prev) || unicode.IsDigit(prev) ||
				(unicode.IsUpper(prev) && i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
				out = append(out, string(rs[start:i]))
				start = i
			}
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, string(rs[start:]))
	}
	return out
}

// stem folds English plurals: categories → category, boxes → box,
// invoices → invoice, orders → order (not class, status, analysis).
func stem(w string) string {
	switch {
	case len(w) > 4 && strings.HasSuffix(w, "ies"):
		return w[:len(w)-3] + "y"
	case strings.HasSuffix(w, "sses"), strings.HasSuffix(w, "xes"), strings.HasSuffix(w, "ches"), strings.HasSuffix(w, "shes"):
		return w[:len(w)-2]
	case len(w) > 3 && strings.HasSuffix(w, "s") && !strings.HasSuffix(w, "ss") && !strings.HasSuffix(w, "us") && !strings.HasSuffix(w, "is"):
		return w[:len(w)-1]
	}
	return w
}

// stopWords are question words that name no table: English function
// words, and the SQL keywords of a question typed as SQL that are
// unlikely names (order, group, end and limit may well be).
var stopWords = stemmedSet(`a an the of in on at to for from by with without and or not no is are was were be been
	do does did have has had what which who whom whose when where why how many much me my our we us you your it its this that these those
	there their them they all any each every per some show list give get find tell please can could would should want need
	select distinct as join inner outer having offset between like ilike null asc desc into`)

func stemmedSet(words string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.Fields(words) {
		out[stem(w)] = true
	}
	return out
}
