package tools

import (
	"bytes"
	"encoding/json"
	"strings"
)

// maxDescribeValue bounds how much of one argument value Describe shows.
const maxDescribeValue = 60

// Describe renders a tool call for people, keeping the argument order the
// model used: `get_financials {ticker: "BHP", report_type: "quarterly"}`.
// Strings are quoted, other values are compact JSON, long values are cut
// with "…". Arguments that are not a JSON object are shown as they are.
func Describe(tool string, rawArgs []byte) string {
	args := bytes.TrimSpace(rawArgs)
	if len(args) == 0 || string(args) == "{}" {
		return tool
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return tool + " " + cut(string(args))
	}
	var parts []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return tool + " " + cut(string(args))
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return tool + " " + cut(string(args))
		}
		parts = append(parts, key+": "+cut(compact(v)))
	}
	if len(parts) == 0 {
		return tool
	}
	return tool + " {" + strings.Join(parts, ", ") + "}"
}

// compact returns v without insignificant whitespace.
func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, v); err != nil {
		return string(v)
	}
	return b.String()
}

// cut shortens s to maxDescribeValue runes.
func cut(s string) string {
	r := []rune(s)
	if len(r) <= maxDescribeValue {
		return s
	}
	return string(r[:maxDescribeValue-1]) + "…"
}
