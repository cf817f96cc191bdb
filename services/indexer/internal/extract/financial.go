package extract

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// TypeFinancial is the extract type of financial figures.
const TypeFinancial = "financial"

// Financial extracts financial figures from markdown and HTML tables that
// look financial: at least two recognised metrics (revenue, net income,
// EPS, dividend yield, P/E, market cap) as column headers (one row per
// company) or as row labels (one column per period). Each company row or
// period column becomes one "financial" extract with ticker, report date
// and type, and the metrics as numbers in base units (a "US$m" column is
// multiplied out; EPS in cents becomes dollars; yields stay percentages).
// It is deterministic: confidence 1.0.
type Financial struct{}

var _ Extractor = Financial{}

// Name returns "financial_table".
func (Financial) Name() string { return "financial_table" }

// SchemaVersion returns 1.
func (Financial) SchemaVersion() int { return 1 }

// CanHandle reports whether the text has anything table-shaped.
func (Financial) CanHandle(doc *Document) bool {
	return strings.Contains(doc.Text, "|") || strings.Contains(strings.ToLower(doc.Text), "<table")
}

// Extract returns one extract per company row or period column.
func (Financial) Extract(_ context.Context, doc *Document) ([]Extract, error) {
	var out []Extract
	for ti, t := range Tables(doc.Text) {
		for _, rec := range financialRecords(t, doc) {
			rec["table_index"] = float64(ti)
			out = append(out, Extract{Type: TypeFinancial, Data: rec, Confidence: 1, SpanStart: t.Start, SpanEnd: t.End})
		}
	}
	return out, nil
}

// metricFields maps label patterns to extract fields, most specific first.
var metricFields = []struct {
	field string
	re    *regexp.Regexp
}{
	{"eps", regexp.MustCompile(`\b(eps|earnings per share)\b`)},
	{"dividend_yield", regexp.MustCompile(`\b(dividend yield|div\.? yield|yield)\b`)},
	{"pe_ratio", regexp.MustCompile(`(^|\W)(p/?e( ratio)?|price[ /-]*(to[ -])?earnings( ratio)?)(\W|$)`)},
	{"market_cap", regexp.MustCompile(`\b(market cap(itali[sz]ation)?|mkt\.? cap|market value)\b`)},
	{"net_income", regexp.MustCompile(`\b(net income|net profit|net earnings|net loss|profit after tax|npat|underlying (net )?profit|attributable profit)\b`)},
	{"revenue", regexp.MustCompile(`\b(total revenues?|revenues?|net sales|sales|turnover)\b`)},
}

// keyColumns are the non-metric columns of a company-per-row table.
var keyColumns = []struct {
	field string
	re    *regexp.Regexp
}{
	{"ticker", regexp.MustCompile(`^(ticker|symbol|code|asx code|stock code|ticker symbol)$`)},
	{"company", regexp.MustCompile(`^(company|company name|name|issuer)$`)},
	{"report_date", regexp.MustCompile(`^(date|report date|period end(ing)?|as (of|at)|period)$`)},
	{"report_type", regexp.MustCompile(`^(report type|type|period type)$`)},
}

// scaledFields are the money amounts a column unit ("US$m") applies to.
var scaledFields = map[string]bool{"revenue": true, "net_income": true, "market_cap": true}

func metricOf(label string) string {
	l := normLabel(label)
	for _, m := range metricFields {
		if m.re.MatchString(l) {
			return m.field
		}
	}
	return ""
}

func keyOf(label string) string {
	l := strings.TrimSpace(unitRe.ReplaceAllString(normLabel(label), ""))
	for _, k := range keyColumns {
		if k.re.MatchString(l) {
			return k.field
		}
	}
	return ""
}

func normLabel(s string) string {
	return strings.Join(strings.Fields(strings.ToLower(s)), " ")
}

// financialRecords reads one table in whichever layout it has.
func financialRecords(t Table, doc *Document) []map[string]any {
	if recs := wideRecords(t, doc); recs != nil {
		return recs
	}
	return longRecords(t, doc)
}

// wideRecords reads a table with one company per row and metrics as
// columns.
func wideRecords(t Table, doc *Document) []map[string]any {
	metrics := map[int]string{}
	keys := map[int]string{}
	distinct := map[string]bool{}
	for i, h := range t.Header {
		if k := keyOf(h); k != "" {
			keys[i] = k
			continue
		}
		if m := metricOf(h); m != "" {
			metrics[i] = m
			distinct[m] = true
		}
	}
	hasKey := false
	for _, k := range keys {
		hasKey = hasKey || k == "ticker" || k == "company"
	}
	if len(distinct) < 2 || !hasKey {
		return nil
	}
	ctx := docContext(t, doc)
	var out []map[string]any
	for _, row := range t.Rows {
		rec := map[string]any{}
		for i, k := range keys {
			v := strings.TrimSpace(row[i])
			if v == "" {
				continue
			}
			switch k {
			case "ticker":
				rec["ticker"] = strings.ToUpper(v)
			case "report_date":
				if p := parsePeriod(v); p.date != "" {
					rec["report_date"] = p.date
					if p.typ != "" {
						rec["report_type"] = p.typ
					}
				} else {
					rec["report_date"] = v
				}
			case "report_type":
				rec["report_type"] = reportType(v)
			default:
				rec[k] = v
			}
		}
		if _, ok := rec["ticker"]; !ok {
			if c, ok := rec["company"].(string); ok {
				if tk := tickerIn(c); tk != "" {
					rec["ticker"] = tk
				}
			}
		}
		if rec["ticker"] == nil && rec["company"] == nil {
			continue
		}
		n := 0
		for i, m := range metrics {
			if setAmount(rec, m, row[i], t.Header[i]) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		ctx.fill(rec)
		out = append(out, rec)
	}
	if out == nil {
		return []map[string]any{} // financial layout, but no usable rows
	}
	return out
}

// setAmount parses cell as metric m (label gives the unit and currency
// context) into rec, with its currency if it names one, and reports whether
// it held an amount.
func setAmount(rec map[string]any, m, cell, label string) bool {
	v, cur, ok := parseAmount(cell, label, m)
	if !ok {
		return false
	}
	rec[m] = v
	if cur != "" {
		rec["currency"] = cur
	}
	return true
}

// longRecords reads a table with one metric per row and one period (or a
// single value) per column.
func longRecords(t Table, doc *Document) []map[string]any {
	if len(t.Header) < 2 {
		return nil
	}
	rowMetric := map[int]string{}
	distinct := map[string]bool{}
	for r, row := range t.Rows {
		if m := metricOf(row[0]); m != "" {
			rowMetric[r] = m
			distinct[m] = true
		}
	}
	if len(distinct) < 2 {
		return nil
	}
	ctx := docContext(t, doc)
	var out []map[string]any
	for c := 1; c < len(t.Header); c++ {
		rec := map[string]any{}
		n := 0
		for r, m := range rowMetric {
			if _, done := rec[m]; done {
				continue
			}
			if setAmount(rec, m, t.Rows[r][c], t.Rows[r][0]+" "+t.Header[c]) {
				n++
			}
		}
		if n == 0 {
			continue
		}
		label := strings.TrimSpace(t.Header[c])
		if p := parsePeriod(label); p.date != "" {
			rec["report_date"] = p.date
			if p.typ != "" {
				rec["report_type"] = p.typ
			}
		} else if label != "" && !plainCol.MatchString(label) {
			rec["period_label"] = label
		}
		ctx.fill(rec)
		out = append(out, rec)
	}
	return out
}

// tableContext is what the text around a table says about all its rows.
type tableContext struct {
	ticker, company, date, typ, currency string
}

func docContext(t Table, doc *Document) tableContext {
	var c tableContext
	for _, s := range []string{t.Context, doc.Title, firstLines(doc.Text, 5)} {
		if c.ticker == "" {
			c.ticker = tickerIn(s)
		}
		p := periodIn(s)
		if c.date == "" {
			c.date = p.date
		}
		if c.typ == "" {
			c.typ = p.typ
		}
		if c.typ == "" {
			c.typ = reportTypeWords(s)
		}
		if c.currency == "" {
			c.currency = currencyIn(s)
		}
	}
	return c
}

// fill sets what the row itself did not say.
func (c tableContext) fill(rec map[string]any) {
	set := func(k, v string) {
		if _, ok := rec[k]; !ok && v != "" {
			rec[k] = v
		}
	}
	set("ticker", c.ticker)
	set("report_date", c.date)
	set("report_type", c.typ)
	set("currency", c.currency)
}

func firstLines(s string, n int) string {
	ls := strings.SplitN(s, "\n", n+1)
	return strings.Join(ls[:min(n, len(ls))], "\n")
}

var (
	exchangeTicker = regexp.MustCompile(`\b(?:ASX|NYSE|NASDAQ|Nasdaq|LSE|TSX|HKEX|NZX)\s*:\s*([A-Z][A-Z0-9.]{0,6})\b`)
	labelTicker    = regexp.MustCompile(`(?i)\b(?:ticker|symbol)\s*[:=]\s*([A-Z][A-Z0-9.]{0,6})\b`)
	parenTicker    = regexp.MustCompile(`\(([A-Z]{2,5})\)`)
)

// tickerIn finds an explicitly marked ticker: "ASX: BHP", "Ticker: BHP",
// or a parenthesised upper-case code "(BHP)".
func tickerIn(s string) string {
	for _, re := range []*regexp.Regexp{exchangeTicker, labelTicker, parenTicker} {
		if m := re.FindStringSubmatch(s); m != nil && !notTicker[m[1]] {
			return strings.ToUpper(m[1])
		}
	}
	return ""
}

// notTicker lists upper-case codes that are never tickers.
var notTicker = map[string]bool{"FY": true, "USD": true, "AUD": true, "EUR": true, "GBP": true, "EPS": true, "NPAT": true, "CEO": true, "CFO": true, "YOY": true, "EBIT": true, "EBITDA": true}

type period struct{ date, typ string }

var (
	fyRe      = regexp.MustCompile(`(?i)\bFY\s?'?(\d{4}|\d{2})\b`)
	quarterRe = regexp.MustCompile(`(?i)\b(?:Q([1-4])\s?(?:FY\s?)?'?(\d{4}|\d{2})|(\d{4})\s?Q([1-4]))\b`)
	halfRe    = regexp.MustCompile(`(?i)\b(?:([12])H|H([12])|HY)\s?(?:FY\s?)?'?(\d{4}|\d{2})\b`)
	isoDateRe = regexp.MustCompile(`\b(\d{4})-(\d{2})-(\d{2})\b`)
	longDate  = regexp.MustCompile(`\b(\d{1,2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{4}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* \d{1,2},? \d{4})\b`)
	yearRe    = regexp.MustCompile(`^(19|20)\d{2}$`)
)

func fullYear(y string) string {
	if len(y) == 2 {
		return "20" + y
	}
	return y
}

// parsePeriod reads a period label: "FY2024", "Q3 2024", "H1 FY24",
// "2024-06-30", "30 June 2024" or a bare year.
func parsePeriod(s string) period {
	s = strings.TrimSpace(s)
	if yearRe.MatchString(s) {
		return period{date: s}
	}
	return periodIn(s)
}

// periodIn finds the first period mention in free text.
func periodIn(s string) period {
	if m := quarterRe.FindStringSubmatch(s); m != nil {
		if m[1] != "" {
			return period{date: "Q" + m[1] + " " + fullYear(m[2]), typ: "quarterly"}
		}
		return period{date: "Q" + m[4] + " " + m[3], typ: "quarterly"}
	}
	if m := halfRe.FindStringSubmatch(s); m != nil {
		h := m[1] + m[2]
		if h == "" {
			h = "1"
		}
		return period{date: "H" + h + " FY" + fullYear(m[3]), typ: "half_year"}
	}
	if m := fyRe.FindStringSubmatch(s); m != nil {
		return period{date: "FY" + fullYear(m[1]), typ: "annual"}
	}
	if m := isoDateRe.FindString(s); m != "" {
		return period{date: m}
	}
	if m := longDate.FindString(s); m != "" {
		for _, layout := range []string{"2 January 2006", "2 Jan 2006", "January 2, 2006", "January 2 2006", "Jan 2, 2006", "Jan 2 2006"} {
			if t, err := time.Parse(layout, m); err == nil {
				return period{date: t.Format("2006-01-02")}
			}
		}
	}
	return period{}
}

func reportTypeWords(s string) string {
	l := strings.ToLower(s)
	switch {
	case strings.Contains(l, "quarterly") || strings.Contains(l, "quarter"):
		return "quarterly"
	case strings.Contains(l, "half-year") || strings.Contains(l, "half year") || strings.Contains(l, "interim"):
		return "half_year"
	case strings.Contains(l, "annual") || strings.Contains(l, "full year") || strings.Contains(l, "full-year"):
		return "annual"
	}
	return ""
}

func reportType(s string) string {
	if t := reportTypeWords(s); t != "" {
		return t
	}
	return strings.ToLower(strings.TrimSpace(s))
}

var (
	unitRe     = regexp.MustCompile(`\(([^)]*)\)`)
	currencyRe = regexp.MustCompile(`(?i)(US\$|A\$|AU\$|NZ\$|C\$|HK\$|S\$|€|£|¥|\$|\b(?:USD|AUD|EUR|GBP|JPY|CAD|NZD|HKD|CHF)\b)`)
	numberRe   = regexp.MustCompile(`[-−]?\d[\d,]*(?:\.\d+)?|[-−]?\.\d+`)
)

var currencyCodes = map[string]string{
	"us$": "USD", "$": "USD", "a$": "AUD", "au$": "AUD", "nz$": "NZD", "c$": "CAD", "hk$": "HKD", "s$": "SGD",
	"€": "EUR", "£": "GBP", "¥": "JPY",
}

func currencyIn(s string) string {
	m := currencyRe.FindString(s)
	if m == "" {
		return ""
	}
	if c, ok := currencyCodes[strings.ToLower(m)]; ok {
		return c
	}
	return strings.ToUpper(m)
}

// scales are magnitude words and suffixes, largest first: "bn", "55.7b",
// "(US$m)", "in millions", "'000".
var scales = []struct {
	re *regexp.Regexp
	x  float64
}{
	{regexp.MustCompile(`(?:\d\s?|\b)(tn|trillions?)\b|\dt\b|\$t\b|\([^)]*\bt\)`), 1e12},
	{regexp.MustCompile(`(?:\d\s?|\b)(bn|billions?)\b|\d\s?b\b|\$\s?b\b|\([^)]*\bb\)`), 1e9},
	{regexp.MustCompile(`(?:\d\s?|\b)(mn|mm|millions?)\b|\d\s?m\b|\$\s?m\b|\([^)]*\bm\)`), 1e6},
	{regexp.MustCompile(`(?:\d\s?|\b)(thousands?)\b|'000|\d\s?k\b|\$\s?k\b|\([^)]*\bk\)`), 1e3},
}

var (
	centsRe  = regexp.MustCompile(`(?i)\bcents?\b|¢|\d\s?c\b`)
	plainCol = regexp.MustCompile(`(?i)^(value|amount|actual|result|figure)s?$`)
)

// scaleOf returns the magnitude s names, or 1.
func scaleOf(s string) float64 {
	l := strings.ToLower(s)
	for _, sc := range scales {
		if sc.re.MatchString(l) {
			return sc.x
		}
	}
	return 1
}

// parseAmount reads a cell as the value of field, using label (the column
// header or row label) for units. It returns the number, the currency if
// one is named, and whether the cell held a number.
func parseAmount(cell, label, field string) (float64, string, bool) {
	c := strings.TrimSpace(cell)
	lc := strings.ToLower(c)
	if c == "" || lc == "-" || lc == "—" || lc == "–" || lc == "n/a" || lc == "na" || lc == "nm" || lc == "n.m." {
		return 0, "", false
	}
	num := numberRe.FindString(c)
	if num == "" {
		return 0, "", false
	}
	neg := strings.HasPrefix(num, "-") || strings.HasPrefix(num, "−") ||
		(strings.HasPrefix(c, "(") && strings.HasSuffix(c, ")"))
	num = strings.TrimLeft(num, "-−")
	v, err := strconv.ParseFloat(strings.ReplaceAll(num, ",", ""), 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, "", false
	}
	if neg {
		v = -v
	}
	cur := currencyIn(c)
	if cur == "" {
		cur = currencyIn(label)
	}
	rest := strings.Replace(c, num, " 0", 1) // keep "55.7bn" → " 0bn" readable for the suffix match
	switch {
	case scaledFields[field]:
		if s := scaleOf(rest); s != 1 {
			v *= s
		} else {
			units := strings.Join(unitRe.FindAllString(label, -1), " ") + " " + label
			v *= scaleOf(units)
		}
	case field == "eps":
		if centsRe.MatchString(label + " " + c) {
			v /= 100
		}
	}
	return round(v), cur, true
}

// round drops float noise from unit scaling (55.7 * 1e9).
func round(v float64) float64 {
	if v == 0 {
		return 0
	}
	p := math.Pow(10, 12-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}
