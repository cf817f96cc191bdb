package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// COMPARE_SQL: two queries, each generated or typed and each confirmed
// (the seed's stages), compared row by row; the diff is written to a table
// on a writable connection and shown.
//
//	ASK_FIRST_SQL_METHOD --> NEED_FIRST_NATURAL_LANGUAGE | NEED_FIRST_USER_SQL
//	--> CONFIRM_FIRST_GENERATED_SQL | CONFIRM_FIRST_USER_SQL (yes: its columns are read)
//	--> ASK_SECOND_SQL_METHOD --> ... the same for the second query
//	--> ASK_AUTO_MATCH (yes) | WAITING_MAP_TABLE (a mapping typed or selected)
//	--> ASK_COMPARE_KEY --> ASK_REPORTING_TYPE --> ASK_COMPARE_SCHEMA (writable connections only)
//	--> ASK_COMPARE_TABLE_NAME --> ASK_COMPARE_JOB_NAME --> EXECUTE_COMPARE_SQL --yes--> (EXECUTING)
//	--> NEED_WRITE_OR_EMAIL
//
// Each query may run on its own connection (a "connection:<name>"
// selection at its method stage), so two engines can be compared. Both
// queries pass the same checks as READ_SQL's (package safety, then the
// engine's own) and run on the same read path; the diff is computed here
// and written with connections' WriteRows, never by SQL of the user's on
// the writable connection. The run is one execution under the claim of
// the package doc, so a confirmation raced or retried writes once.

// Stages of COMPARE_SQL.
const (
	StageAskFirstSQLMethod                Stage = "ASK_FIRST_SQL_METHOD"
	StageNeedFirstNaturalLanguage         Stage = "NEED_FIRST_NATURAL_LANGUAGE"
	StageNeedFirstUserSQL                 Stage = "NEED_FIRST_USER_SQL"
	StageConfirmFirstGeneratedSQL         Stage = "CONFIRM_FIRST_GENERATED_SQL"
	StageConfirmFirstUserSQL              Stage = "CONFIRM_FIRST_USER_SQL"
	StageAskSecondSQLMethod               Stage = "ASK_SECOND_SQL_METHOD"
	StageNeedSecondNaturalLanguage        Stage = "NEED_SECOND_NATURAL_LANGUAGE"
	StageNeedSecondUserSQL                Stage = "NEED_SECOND_USER_SQL"
	StageConfirmSecondGeneratedSQL        Stage = "CONFIRM_SECOND_GENERATED_SQL"
	StageConfirmSecondUserSQL             Stage = "CONFIRM_SECOND_USER_SQL"
	StageAskAutoMatch                     Stage = "ASK_AUTO_MATCH"
	StageWaitingMapTable                  Stage = "WAITING_MAP_TABLE"
	StageAskCompareKey                    Stage = "ASK_COMPARE_KEY"
	StageAskReportingType                 Stage = "ASK_REPORTING_TYPE"
	StageAskCompareSchema                 Stage = "ASK_COMPARE_SCHEMA"
	StageAskCompareTableName              Stage = "ASK_COMPARE_TABLE_NAME"
	StageAskCompareJobName                Stage = "ASK_COMPARE_JOB_NAME"
	StageExecuteCompareSQL                Stage = "EXECUTE_COMPARE_SQL"
	compareParamPrefix                          = "compare_"
	paramCompareMapping, paramCompareKey        = "compare_mapping", "compare_key"
	paramCompareReport                          = "compare_reporting_type"
	paramCompareTarget, paramCompareSchem       = "compare_target_connection", "compare_schema"
	paramCompareTable, paramCompareJob          = "compare_table", "compare_job_name"
	// probeRows is how many rows a confirmed query of a comparison reads
	// to learn its columns and their kinds.
	probeRows = 20
	// maxJobName bounds a comparison's job name, in bytes.
	maxJobName = 100
	// optConnectionPrefix marks a selection that picks the connection of
	// the query being asked for.
	optConnectionPrefix = "connection:"
	// optKeyPrefix marks a key column selection.
	optKeyPrefix = "key:"
)

// compareSide is one of the two queries and its stages.
type compareSide struct {
	name                                          string // "first" or "second"
	ask, needNL, needSQL, confirmGen, confirmUser Stage
}

var (
	firstSide = compareSide{"first", StageAskFirstSQLMethod, StageNeedFirstNaturalLanguage, StageNeedFirstUserSQL,
		StageConfirmFirstGeneratedSQL, StageConfirmFirstUserSQL}
	secondSide = compareSide{"second", StageAskSecondSQLMethod, StageNeedSecondNaturalLanguage, StageNeedSecondUserSQL,
		StageConfirmSecondGeneratedSQL, StageConfirmSecondUserSQL}
)

// param names a parameter of the side's query: compare_first_sql, ...
func (c compareSide) param(what string) string { return compareParamPrefix + c.name + "_" + what }

// sideOf returns the query a stage of the two queries' stages is about.
func sideOf(st Stage) (compareSide, bool) {
	for _, c := range []compareSide{firstSide, secondSide} {
		switch st {
		case c.ask, c.needNL, c.needSQL, c.confirmGen, c.confirmUser:
			return c, true
		}
	}
	return compareSide{}, false
}

// isCompareWord reports whether w asks for COMPARE_SQL.
func isCompareWord(w string) bool {
	return w == "compare" || w == "compare_sql" || w == "compare two queries"
}

// startCompare begins COMPARE_SQL on the session's connection; parameters
// gathered by an earlier comparison are cleared.
func (a *Agent) startCompare(s *Session) Reply {
	for k := range s.Params {
		if strings.HasPrefix(k, compareParamPrefix) {
			delete(s.Params, k)
		}
	}
	s.JobKind, s.PendingSQL = JobCompareSQL, ""
	s.Params[firstSide.param("connection")] = s.Params[paramConnection]
	s.Params[firstSide.param("dialect")] = s.Params[paramDialect]
	return a.askCompareMethod(s, firstSide, "Let's compare two queries.")
}

// askCompareMethod asks how to get side's query; the options also offer
// the other connections for it.
func (a *Agent) askCompareMethod(s *Session, side compareSide, prefix string) Reply {
	s.Stage, s.PendingSQL = side.ask, ""
	conn := s.Params[side.param("connection")]
	opts := append([]Option{}, methodOptions...)
	for _, c := range a.db(s).List() {
		if c.Name != conn {
			opts = append(opts, Option{Value: optConnectionPrefix + c.Name, Label: fmt.Sprintf("Run the %s query on %s (%s)", side.name, c.Name, c.Dialect)})
		}
	}
	opts = append(opts, Option{Value: "cancel", Label: "Cancel the comparison"})
	return Reply{Text: fmt.Sprintf("%s The %s query runs on %s. Should I generate it from a question, or will you write it?",
		prefix, side.name, conn), Options: opts}
}

// onCompare applies one input to a COMPARE_SQL session.
func (a *Agent) onCompare(ctx context.Context, s *Session, in input) (Reply, error) {
	if side, ok := sideOf(s.Stage); ok {
		return a.onCompareQuery(ctx, s, side, in)
	}
	switch s.Stage {
	case StageAskAutoMatch, StageWaitingMapTable:
		return a.onMatch(s, in)
	case StageAskCompareKey:
		return a.onCompareKey(s, in)
	case StageAskReportingType:
		return a.onReportingType(ctx, s, in)
	case StageAskCompareSchema:
		return a.onCompareSchema(ctx, s, in)
	case StageAskCompareTableName:
		return a.onCompareTable(ctx, s, in)
	case StageAskCompareJobName:
		return a.onCompareJobName(s, in)
	default: // StageExecuteCompareSQL
		w := in.word()
		switch {
		case cancelWords[w]:
			return a.cancelCompare(s), nil
		case in.selection != "" && !a.confirms(w):
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		case !a.confirms(w):
			return a.confirmCompare(s, "Reply yes to run the comparison, or cancel."), nil
		}
		for _, side := range []compareSide{firstSide, secondSide} {
			if _, err := safety.Check(s.Params[side.param("sql")], safety.Dialect(s.Params[side.param("dialect")])); err != nil {
				return a.askCompareMethod(s, side, fmt.Sprintf("I can't run the %s query: %s.", side.name, reason(err))), nil
			}
		}
		return a.beginExecution(s), nil
	}
}

// cancelCompare ends the comparison and goes back to READ_SQL's method
// choice.
func (a *Agent) cancelCompare(s *Session) Reply {
	s.JobKind = JobReadSQL
	return a.askMethod(s, "Cancelled; nothing was compared or written.")
}

// onCompareQuery walks the stages of one of the two queries.
func (a *Agent) onCompareQuery(ctx context.Context, s *Session, side compareSide, in input) (Reply, error) {
	w := in.word()
	conn, dialect := s.Params[side.param("connection")], s.Params[side.param("dialect")]
	switch s.Stage {
	case side.ask, side.needNL, side.needSQL:
		switch {
		case w == methodGenerate:
			s.Params[side.param("method")], s.Stage = methodGenerate, side.needNL
			return Reply{Text: fmt.Sprintf("What should the %s query answer? Ask in plain English.", side.name)}, nil
		case w == methodUserSQL:
			s.Params[side.param("method")], s.Stage = methodUserSQL, side.needSQL
			return Reply{Text: fmt.Sprintf("Type the %s query (a single read-only SELECT).", side.name)}, nil
		case w == "cancel":
			return a.cancelCompare(s), nil
		case strings.HasPrefix(in.selection, optConnectionPrefix) && s.Stage == side.ask:
			name := strings.TrimPrefix(in.selection, optConnectionPrefix)
			d, err := a.db(s).Dialect(name)
			if err != nil {
				return Reply{}, inputErr("selection", "no connection named %q; pick one of the options", name)
			}
			s.Params[side.param("connection")], s.Params[side.param("dialect")] = name, d
			return a.askCompareMethod(s, side, fmt.Sprintf("The %s query will run on %s.", side.name, name)), nil
		case in.selection != "":
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		case a.confirms(w):
			// An acknowledgement is no question and no SQL.
			if s.Stage == side.ask {
				return a.askCompareMethod(s, side, ""), nil
			}
			return Reply{Text: fmt.Sprintf("Give the %s query, or what it should answer.", side.name)}, nil
		case s.Stage == side.needSQL || (s.Stage == side.ask && looksLikeSQL(in.text)):
			s.Params[side.param("method")] = methodUserSQL
			return a.proposeCompareSQL(s, side, in.text), nil
		default:
			s.Params[side.param("method")], s.Params[side.param("question")] = methodGenerate, in.text
			return a.proposeCompareGenerated(ctx, s, side, in.text, "", "")
		}
	default: // side.confirmGen, side.confirmUser
		switch {
		case a.confirms(w):
			sql := s.PendingSQL
			if _, err := safety.Check(sql, safety.Dialect(dialect)); err != nil {
				return a.askCompareMethod(s, side, fmt.Sprintf("I can't run the pending SQL: %s.", reason(err))), nil
			}
			return a.probe(ctx, s, side, conn, sql)
		case cancelWords[w]:
			return a.askCompareMethod(s, side, "Dropped that query."), nil
		case in.selection != "":
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		case s.Stage == side.confirmGen && !looksLikeSQL(in.text):
			return a.proposeCompareGenerated(ctx, s, side, s.Params[side.param("question")], s.PendingSQL, in.text)
		default:
			s.Params[side.param("method")] = methodUserSQL
			return a.proposeCompareSQL(s, side, in.text), nil
		}
	}
}

// proposeCompareGenerated has the model write side's query and asks for
// its confirmation.
func (a *Agent) proposeCompareGenerated(ctx context.Context, s *Session, side compareSide, question, previous, feedback string) (Reply, error) {
	sql, refusal, err := a.generate(ctx, s, s.Params[side.param("connection")], s.Params[side.param("dialect")], question, previous, feedback)
	if err != nil {
		return Reply{}, err
	}
	if refusal != "" {
		s.Stage, s.PendingSQL = side.needNL, ""
		return Reply{Text: refusal}, nil
	}
	s.Stage, s.PendingSQL = side.confirmGen, sql
	return confirmReply(fmt.Sprintf("Here is the %s query I would compare. Is it right? Reply yes, or tell me what to change.", side.name), sql), nil
}

// proposeCompareSQL checks the user's query for side and asks for its
// confirmation, or refuses it.
func (a *Agent) proposeCompareSQL(s *Session, side compareSide, sql string) Reply {
	checked, err := safety.Check(sql, safety.Dialect(s.Params[side.param("dialect")]))
	if err != nil {
		s.Stage, s.PendingSQL = side.needSQL, ""
		return Reply{Text: fmt.Sprintf("I can't run that: %s. Only a single read-only SELECT is allowed; send another query.", reason(err))}
	}
	s.Stage, s.PendingSQL = side.confirmUser, checked
	return confirmReply(fmt.Sprintf("I will compare this as the %s query. Is it right? Reply yes, or send a corrected query.", side.name), checked)
}

// compareColumn is a column of one of the compared queries: its name and
// the kind of its values ("number", "text", "bool" or "" when the probe saw
// only NULLs).
type compareColumn struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// probe reads the first rows of side's confirmed query, on the read path
// of READ_SQL, to learn its columns, and moves on to the second query or
// the column matching. A read runs here without the execution claim: it
// changes nothing, so running it twice costs only time.
func (a *Agent) probe(ctx context.Context, s *Session, side compareSide, conn, sql string) (Reply, error) {
	res, err := a.db(s).Query(ctx, conn, sql, probeRows, a.opts.QueryTimeout)
	var refused *connections.RefusedError
	switch {
	case errors.As(err, &refused):
		s.Stage, s.PendingSQL = side.needSQL, ""
		if s.Params[side.param("method")] == methodGenerate {
			s.Stage = side.needNL
		}
		return Reply{Text: fmt.Sprintf("The database won't run the %s query: %s. Only a read-only query that changes nothing can run; send another.", side.name, refused.Reason)}, nil
	case errors.Is(err, connections.ErrQuery):
		return confirmReply(fmt.Sprintf("The database refused the %s query: %v. Tell me what to change, or send corrected SQL.", side.name,
			strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": ")), sql), nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	cols := make([]compareColumn, len(res.Columns))
	for i, name := range res.Columns {
		cols[i] = compareColumn{Name: name, Kind: probedKind(res.Rows, i)}
	}
	raw, _ := json.Marshal(cols)
	s.Params[side.param("sql")], s.Params[side.param("columns")], s.PendingSQL = sql, string(raw), ""
	if side == firstSide {
		if s.Params[secondSide.param("connection")] == "" {
			s.Params[secondSide.param("connection")], s.Params[secondSide.param("dialect")] = conn, s.Params[side.param("dialect")]
		}
		return a.askCompareMethod(s, secondSide, fmt.Sprintf("The first query has the columns %s.", columnList(cols))), nil
	}
	return a.askAutoMatch(s, fmt.Sprintf("The second query has the columns %s.", columnList(cols))), nil
}

// probedKind is the kind of the values of column i in rows.
func probedKind(rows [][]any, i int) string {
	for _, r := range rows {
		switch r[i].(type) {
		case int64, float64:
			return "number"
		case bool:
			return "bool"
		case string:
			if numberRE.MatchString(r[i].(string)) {
				return "number"
			}
			return "text"
		}
	}
	return ""
}

func columnList(cols []compareColumn) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// columnsOf returns the probed columns of side's query.
func columnsOf(s *Session, side compareSide) []compareColumn {
	var cols []compareColumn
	_ = json.Unmarshal([]byte(s.Params[side.param("columns")]), &cols)
	return cols
}

// columnPair maps a column of the first query to one of the second.
type columnPair struct {
	First  string `json:"first"`
	Second string `json:"second"`
}

// autoMatch pairs the columns of the two queries: first by name (case
// folded), then each column left whose kind only one column left on the
// other side shares; in the first query's column order.
func autoMatch(first, second []compareColumn) []columnPair {
	var pairs []columnPair
	usedB := map[int]bool{}
	var restA []compareColumn
	for _, ca := range first {
		found := false
		for j, cb := range second {
			if !usedB[j] && strings.EqualFold(ca.Name, cb.Name) {
				pairs, usedB[j], found = append(pairs, columnPair{ca.Name, cb.Name}), true, true
				break
			}
		}
		if !found {
			restA = append(restA, ca)
		}
	}
	count := func(kind string, cols []compareColumn, skip map[int]bool) (n, at int) {
		for j, c := range cols {
			if !skip[j] && c.Kind == kind {
				n, at = n+1, j
			}
		}
		return n, at
	}
	for _, ca := range restA {
		if ca.Kind == "" {
			continue
		}
		nA, _ := count(ca.Kind, restA, nil)
		nB, at := count(ca.Kind, second, usedB)
		if nA == 1 && nB == 1 {
			pairs, usedB[at] = append(pairs, columnPair{ca.Name, second[at].Name}), true
		}
	}
	// In the first query's order, which the diff's columns follow.
	order := map[string]int{}
	for i, c := range first {
		order[c.Name] = i
	}
	sort.Slice(pairs, func(i, j int) bool { return order[pairs[i].First] < order[pairs[j].First] })
	return pairs
}

func pairList(pairs []columnPair) string {
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p.First + "=" + p.Second
	}
	return strings.Join(parts, ", ")
}

// askAutoMatch proposes the automatic column matching.
func (a *Agent) askAutoMatch(s *Session, prefix string) Reply {
	s.Stage = StageAskAutoMatch
	pairs := autoMatch(columnsOf(s, firstSide), columnsOf(s, secondSide))
	if len(pairs) == 0 {
		return a.askMapping(s, prefix+" No columns match by name or type.")
	}
	return Reply{
		Text: fmt.Sprintf("%s Matched by name and type (first=second): %s. Compare these columns?", prefix, pairList(pairs)),
		Options: []Option{
			{Value: "auto", Label: "Yes, compare the matched columns"},
			{Value: "manual", Label: "I'll map the columns myself"},
			{Value: "cancel", Label: "Cancel the comparison"},
		},
	}
}

// askMapping asks for a manual column mapping.
func (a *Agent) askMapping(s *Session, prefix string) Reply {
	s.Stage = StageWaitingMapTable
	r := Reply{Text: fmt.Sprintf("%s Map the columns as first=second pairs separated by commas (first query: %s; second query: %s).",
		prefix, columnList(columnsOf(s, firstSide)), columnList(columnsOf(s, secondSide)))}
	if pairs := autoMatch(columnsOf(s, firstSide), columnsOf(s, secondSide)); len(pairs) > 0 {
		r.Options = []Option{{Value: pairList(pairs), Label: "Use " + pairList(pairs)}}
	}
	r.Options = append(r.Options, Option{Value: "cancel", Label: "Cancel the comparison"})
	return r
}

// onMatch handles ASK_AUTO_MATCH and WAITING_MAP_TABLE.
func (a *Agent) onMatch(s *Session, in input) (Reply, error) {
	w := in.word()
	switch {
	case w == "cancel":
		return a.cancelCompare(s), nil
	case s.Stage == StageAskAutoMatch && (w == "auto" || a.confirms(w)):
		pairs := autoMatch(columnsOf(s, firstSide), columnsOf(s, secondSide))
		return a.useMapping(s, pairs), nil
	case s.Stage == StageAskAutoMatch && (w == "manual" || w == "no"):
		return a.askMapping(s, "Which columns correspond?"), nil
	case s.Stage == StageAskAutoMatch && in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case s.Stage == StageAskAutoMatch:
		// A typed mapping answers the question too.
		if !strings.Contains(in.text, "=") {
			return a.askAutoMatch(s, "Reply yes to compare the matched columns, or map them yourself."), nil
		}
	case a.confirms(w):
		return a.askMapping(s, "I need the mapping itself."), nil
	}
	if in.selection != "" {
		offered := false
		for _, o := range a.askMapping(&Session{Params: s.Params}, "").Options {
			offered = offered || o.Value == in.selection
		}
		if !offered {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
	}
	pairs, err := parseMapping(in.selection+in.text, columnsOf(s, firstSide), columnsOf(s, secondSide))
	if err != nil {
		return Reply{}, inputErr(in.field(), "%v", err)
	}
	return a.useMapping(s, pairs), nil
}

// parseMapping reads "a=b, c=d": each a a column of the first query, each
// b one of the second, each used once.
func parseMapping(text string, first, second []compareColumn) ([]columnPair, error) {
	find := func(cols []compareColumn, name string) (string, bool) {
		for _, c := range cols {
			if c.Name == name {
				return c.Name, true
			}
		}
		for _, c := range cols {
			if strings.EqualFold(c.Name, name) {
				return c.Name, true
			}
		}
		return "", false
	}
	var pairs []columnPair
	usedA, usedB := map[string]bool{}, map[string]bool{}
	for _, part := range strings.Split(text, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		x, y, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not a first=second pair", part)
		}
		a, ok := find(first, strings.TrimSpace(x))
		if !ok {
			return nil, fmt.Errorf("the first query has no column %q (its columns: %s)", strings.TrimSpace(x), columnList(first))
		}
		b, ok := find(second, strings.TrimSpace(y))
		if !ok {
			return nil, fmt.Errorf("the second query has no column %q (its columns: %s)", strings.TrimSpace(y), columnList(second))
		}
		if usedA[a] || usedB[b] {
			return nil, fmt.Errorf("column %s or %s is mapped twice", a, b)
		}
		usedA[a], usedB[b] = true, true
		pairs = append(pairs, columnPair{a, b})
	}
	if len(pairs) == 0 {
		return nil, errors.New("give at least one first=second pair")
	}
	return pairs, nil
}

// mappingOf returns the chosen column pairs.
func mappingOf(s *Session) []columnPair {
	var pairs []columnPair
	_ = json.Unmarshal([]byte(s.Params[paramCompareMapping]), &pairs)
	return pairs
}

// useMapping records pairs and asks for the key.
func (a *Agent) useMapping(s *Session, pairs []columnPair) Reply {
	raw, _ := json.Marshal(pairs)
	s.Params[paramCompareMapping] = string(raw)
	return a.askCompareKey(s, fmt.Sprintf("Comparing %s.", pairList(pairs)))
}

// askCompareKey asks which mapped columns identify a row.
func (a *Agent) askCompareKey(s *Session, prefix string) Reply {
	s.Stage = StageAskCompareKey
	var opts []Option
	for _, p := range mappingOf(s) {
		opts = append(opts, Option{Value: optKeyPrefix + p.First, Label: fmt.Sprintf("%s identifies a row", p.First)})
	}
	opts = append(opts, Option{Value: "none", Label: "No key: compare whole rows"}, Option{Value: "cancel", Label: "Cancel the comparison"})
	return Reply{Text: prefix + " Which column identifies a row in both results (its key)? Give one or more, separated by commas, or choose no key to compare whole rows (then no row counts as changed).", Options: opts}
}

// onCompareKey handles ASK_COMPARE_KEY.
func (a *Agent) onCompareKey(s *Session, in input) (Reply, error) {
	w := in.word()
	var names []string
	switch {
	case w == "cancel":
		return a.cancelCompare(s), nil
	case w == "none" || w == "no key":
	case strings.HasPrefix(in.selection, optKeyPrefix):
		names = []string{strings.TrimPrefix(in.selection, optKeyPrefix)}
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case a.confirms(w):
		return a.askCompareKey(s, "I need the key column's name."), nil
	default:
		names = strings.Split(in.text, ",")
	}
	pairs := mappingOf(s)
	var keys []string
	seen := map[string]bool{}
	for _, n := range names {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		found := ""
		for _, p := range pairs {
			if strings.EqualFold(p.First, n) || strings.EqualFold(p.Second, n) {
				found = p.First
				break
			}
		}
		if found == "" {
			return Reply{}, inputErr(in.field(), "key column %q is not a compared column of both results (compared: %s)", n, pairList(pairs))
		}
		if !seen[found] {
			seen[found] = true
			keys = append(keys, found)
		}
	}
	if len(keys) == len(pairs) && len(keys) > 0 {
		return Reply{}, inputErr(in.field(), "every compared column is a key, so nothing is left to compare; choose fewer key columns, or no key")
	}
	raw, _ := json.Marshal(keys)
	s.Params[paramCompareKey], s.Stage = string(raw), StageAskReportingType
	return Reply{Text: "What should the report hold?", Options: reportOptions}, nil
}

// Reporting types.
const (
	reportFull        = "full"
	reportDifferences = "differences"
	reportSummary     = "summary"
)

var reportOptions = []Option{
	{Value: reportFull, Label: "Full diff: every row, marked same, changed, only in the first or only in the second"},
	{Value: reportDifferences, Label: "Only the differences"},
	{Value: reportSummary, Label: "Summary counts"},
}

// onReportingType handles ASK_REPORTING_TYPE.
func (a *Agent) onReportingType(ctx context.Context, s *Session, in input) (Reply, error) {
	w := in.word()
	var report string
	switch w {
	case reportFull, "full diff":
		report = reportFull
	case reportDifferences, "only differences", "only the differences", "diff":
		report = reportDifferences
	case reportSummary, "summary counts", "counts":
		report = reportSummary
	case "cancel":
		return a.cancelCompare(s), nil
	default:
		if in.selection != "" {
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		return Reply{Text: "Please choose full, differences or summary.", Options: reportOptions}, nil
	}
	s.Params[paramCompareReport] = report
	return a.askCompareSchema(ctx, s)
}

// compareTargets are the schemas of the writable connections, as options
// "<connection>/<schema>". A connection whose schemas cannot be read now
// is left out.
func (a *Agent) compareTargets(ctx context.Context, s *Session) []Option {
	var opts []Option
	for _, c := range a.db(s).List() {
		if ok, err := a.db(s).Writable(c.Name); err != nil || !ok {
			continue
		}
		schemas, err := a.db(s).Schemas(ctx, c.Name)
		if err != nil {
			continue
		}
		for _, sc := range schemas {
			opts = append(opts, Option{Value: c.Name + "/" + sc, Label: fmt.Sprintf("%s on %s", sc, c.Name)})
		}
	}
	return opts
}

// askCompareSchema offers the schemas the diff may be written to.
func (a *Agent) askCompareSchema(ctx context.Context, s *Session) (Reply, error) {
	s.Stage = StageAskCompareSchema
	opts := a.compareTargets(ctx, s)
	if len(opts) == 0 {
		return Reply{Text: "No writable connection is configured (or reachable now), so the comparison has nowhere to go. Cancel, or try again later.",
			Options: []Option{{Value: "cancel", Label: "Cancel the comparison"}}}, nil
	}
	return Reply{Text: "Where should I write the comparison? Only connections configured for writes are offered.", Options: opts, Action: ActionFetchSchemas}, nil
}

// onCompareSchema handles ASK_COMPARE_SCHEMA: a target offered, picked or
// typed as "<connection>/<schema>" (or a schema name only one writable
// connection has).
func (a *Agent) onCompareSchema(ctx context.Context, s *Session, in input) (Reply, error) {
	if in.word() == "cancel" {
		return a.cancelCompare(s), nil
	}
	want := in.selection + strings.TrimSpace(in.text)
	opts := a.compareTargets(ctx, s)
	var match []Option
	for _, o := range opts {
		_, schema, _ := strings.Cut(o.Value, "/")
		if o.Value == want || (in.selection == "" && schema == want) {
			match = append(match, o)
		}
	}
	if len(match) != 1 {
		if conn, _, _ := strings.Cut(want, "/"); in.selection != "" {
			if ok, err := a.db(s).Writable(conn); err == nil && !ok {
				return Reply{}, inputErr("selection", "connection %s is read-only: a comparison is written only to a connection configured with a write DSN", conn)
			}
			return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
		}
		if len(opts) == 0 {
			return a.askCompareSchema(ctx, s)
		}
		return Reply{Text: fmt.Sprintf("%q is not one of the writable schemas; pick one.", want), Options: opts}, nil
	}
	conn, schema, _ := strings.Cut(match[0].Value, "/")
	s.Params[paramCompareTarget], s.Params[paramCompareSchem], s.Stage = conn, schema, StageAskCompareTableName
	return Reply{Text: fmt.Sprintf("What should the new table in %s on %s be called?", schema, conn)}, nil
}

// onCompareTable handles ASK_COMPARE_TABLE_NAME. The diff always goes to
// a new table, so a name the target schema already has (in any case: the
// engines fold some names) is asked again here rather than refused at the
// run; a table created meanwhile is still refused by the write.
func (a *Agent) onCompareTable(ctx context.Context, s *Session, in input) (Reply, error) {
	name := strings.TrimSpace(in.text)
	switch {
	case in.word() == "cancel":
		return a.cancelCompare(s), nil
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case a.confirms(in.word()):
		return Reply{Text: fmt.Sprintf("%q is not a table name. What should the table be called?", name)}, nil
	}
	if err := connections.ValidTableName(name); err != nil {
		return Reply{Text: fmt.Sprintf("%v. What should the table be called?", err)}, nil
	}
	target, schema := s.Params[paramCompareTarget], s.Params[paramCompareSchem]
	if tables, err := a.db(s).Tables(ctx, target, schema); err == nil {
		for _, t := range tables {
			if strings.EqualFold(t, name) {
				return Reply{Text: fmt.Sprintf("%s already exists in %s on %s, and a comparison is written to a new table. What should the new table be called?", t, schema, target)}, nil
			}
		}
	}
	s.Params[paramCompareTable], s.Stage = name, StageAskCompareJobName
	return Reply{Text: "What should this comparison job be called?", Options: []Option{{Value: "default", Label: defaultJobName(s)}}}, nil
}

func defaultJobName(s *Session) string { return "compare into " + s.Params[paramCompareTable] }

// onCompareJobName handles ASK_COMPARE_JOB_NAME.
func (a *Agent) onCompareJobName(s *Session, in input) (Reply, error) {
	name := strings.TrimSpace(in.text)
	switch {
	case in.selection == "default":
		name = defaultJobName(s)
	case in.selection != "":
		return Reply{}, inputErr("selection", "%q is not one of the options", in.selection)
	case a.confirms(in.word()):
		// "okay" after a question is an acknowledgement, not a name.
		return Reply{Text: fmt.Sprintf("%q is not a job name. What should this comparison job be called?", name),
			Options: []Option{{Value: "default", Label: defaultJobName(s)}}}, nil
	}
	if name == "" || len(name) > maxJobName || strings.ContainsAny(name, "\r\n") {
		return Reply{Text: fmt.Sprintf("A job name is one line of at most %d characters. What should it be?", maxJobName)}, nil
	}
	s.Params[paramCompareJob], s.Stage = name, StageExecuteCompareSQL
	return a.confirmCompare(s, "Shall I run it?"), nil
}

// compareSQLText is what a comparison shows for confirmation: both
// queries, each under a comment naming its connection.
func compareSQLText(s *Session) string {
	return fmt.Sprintf("-- first query, on %s\n%s\n\n-- second query, on %s\n%s",
		s.Params[firstSide.param("connection")], s.Params[firstSide.param("sql")],
		s.Params[secondSide.param("connection")], s.Params[secondSide.param("sql")])
}

// confirmCompare asks to confirm the comparison.
func (a *Agent) confirmCompare(s *Session, question string) Reply {
	keys := "no key (whole rows)"
	if k := keysOf(s); len(k) > 0 {
		keys = "key " + strings.Join(k, ", ")
	}
	return Reply{
		Text: fmt.Sprintf("Job %q: I will compare these two queries on %s, %s, and write the %s report to %s.%s on %s. %s",
			s.Params[paramCompareJob], pairList(mappingOf(s)), keys, s.Params[paramCompareReport],
			s.Params[paramCompareSchem], s.Params[paramCompareTable], s.Params[paramCompareTarget], question),
		Options: confirmOptions, SQLToConfirm: compareSQLText(s),
	}
}

func keysOf(s *Session) []string {
	var keys []string
	_ = json.Unmarshal([]byte(s.Params[paramCompareKey]), &keys)
	return keys
}

// runCompare runs both queries of s, in EXECUTE_COMPARE_SQL, compares
// their results and writes the diff.
func (a *Agent) runCompare(ctx context.Context, s *Session) (Reply, error) {
	var results [2]*connections.Result
	for i, side := range []compareSide{firstSide, secondSide} {
		res, err := a.db(s).Query(ctx, s.Params[side.param("connection")], s.Params[side.param("sql")], a.opts.CompareRowLimit, a.opts.QueryTimeout)
		var refused *connections.RefusedError
		switch {
		case errors.As(err, &refused):
			return a.askCompareMethod(s, side, fmt.Sprintf("The database won't run the %s query: %s. Nothing was written.", side.name, refused.Reason)), nil
		case errors.Is(err, connections.ErrQuery):
			return a.confirmCompare(s, fmt.Sprintf("The database refused the %s query: %v. Nothing was written. Reply yes to try again, or cancel.",
				side.name, strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": "))), nil
		case err != nil:
			return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
		case res.TooLarge:
			return a.confirmCompare(s, fmt.Sprintf("The %s query's values pass the %d MiB a comparison holds; nothing was written. Narrow it (cancel and start again).",
				side.name, connections.MaxResultBytes>>20)), nil
		case res.Truncated:
			return a.confirmCompare(s, fmt.Sprintf("The %s query returns more than %d rows, more than a comparison holds; nothing was written. Narrow it (cancel and start again).",
				side.name, a.opts.CompareRowLimit)), nil
		}
		results[i] = res
	}
	d, err := diff(results[0], results[1], mappingOf(s), keysOf(s), s.Params[paramCompareReport])
	if err != nil {
		return a.askCompareKey(s, fmt.Sprintf("I can't compare on that key: %v. Nothing was written.", err)), nil
	}
	target, table := s.Params[paramCompareTarget], s.Params[paramCompareTable]
	n, err := a.db(s).WriteRows(ctx, target, s.Params[paramCompareSchem], table, connections.WriteCreate, d.Columns, d.Rows, a.opts.QueryTimeout)
	switch {
	case errors.Is(err, connections.ErrQuery):
		s.Stage = StageAskCompareTableName
		return Reply{Text: fmt.Sprintf("Writing the comparison failed: %v. Nothing was written. Give another table name.",
			strings.TrimPrefix(err.Error(), connections.ErrQuery.Error()+": "))}, nil
	case err != nil:
		return Reply{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.Params[paramRowCount] = fmt.Sprint(n)
	s.ran = &ranJob{sql: s.Params[firstSide.param("sql")], secondSQL: s.Params[secondSide.param("sql")], rows: n}
	s.Params[compareParamPrefix+"only_in_first"] = fmt.Sprint(d.OnlyFirst)
	s.Params[compareParamPrefix+"only_in_second"] = fmt.Sprint(d.OnlySecond)
	s.Params[compareParamPrefix+"changed"] = fmt.Sprint(d.Changed)
	s.Params[compareParamPrefix+"same"] = fmt.Sprint(d.Same)
	text := fmt.Sprintf("Compared: %d rows only in the first, %d only in the second, %d changed, %d the same. Wrote %d rows to %s.%s on %s.",
		d.OnlyFirst, d.OnlySecond, d.Changed, d.Same, n, s.Params[paramCompareSchem], table, target)
	shown := &connections.Result{Columns: d.Columns, Rows: d.Rows}
	if len(shown.Rows) > a.opts.RowLimit {
		shown.Rows, shown.Truncated = shown.Rows[:a.opts.RowLimit], true
	}
	s.JobKind, s.Stage, s.PendingSQL = JobCompareSQL, StageNeedWriteOrEmail, ""
	opts := afterWriteOptions
	if target == s.Params[paramConnection] {
		// SEND_EMAIL queries the session's connection: the diff can be
		// mailed when it went there.
		s.Params[paramWrittenTable], s.Params[paramWrittenSchema], s.Params[paramWrittenDialect] = table, s.Params[paramCompareSchem], s.Params[paramDialect]
	} else {
		opts = afterWriteOptions[1:]
		delete(s.Params, paramWrittenTable)
	}
	return Reply{Text: text + " E-mail the table, run another query, or finish?", Options: opts, Result: shown}, nil
}
