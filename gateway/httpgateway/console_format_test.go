package httpgateway_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"
)

// formatRunner evaluates console/format.js in node and applies its functions
// to the cases given on stdin.
const formatRunner = `
const fs = require("fs"), vm = require("vm");
const ctx = {};
vm.runInNewContext(fs.readFileSync(process.argv[1], "utf8"), ctx);
const c = JSON.parse(fs.readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify({
  human: c.human.map((x) => ctx.human(x)),
  duration: c.duration.map((d) => ctx.human(ctx.seconds(d))),
  at: c.at.map((t) => ctx.at(t)),
  sql: c.sql.map((q) => ctx.sqlTokens(q)),
  bytes: c.bytes.map((n) => ctx.bytes(n)),
  count: c.count.map((n) => ctx.count(n)),
  steps: c.steps.map(([kind, stage]) => ctx.sqlSteps(kind, stage)),
  diff: c.diff.map(([cols, rows, keys]) => ctx.diffTable(cols, rows, keys)),
  phases: c.phases.map((p) => ctx.intakePhases(p)),
  usage: c.usage.map(([r, by]) => ctx.usageSeries(r, by)),
}));
`

// The console's formatting (console/format.js), run in node: durations in
// human units, protobuf Durations and Timestamps as protojson spells them
// (the forms in google/protobuf/duration.proto and timestamp.proto), and
// SQL split into highlighted tokens without changing its text.
func TestConsoleFormat(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node not found, and CI is set: .ci/run installs nodejs")
		}
		t.Skip("node not found: install nodejs (Debian package) to check the console's formatting")
	}

	human := []struct {
		sec  float64
		want string
	}{
		{0, "0 ms"}, {0.0004, "0 ms"}, {0.42, "420 ms"}, {0.9994, "999 ms"},
		{0.9996, "1.0 s"}, {2.812, "2.8 s"}, {59.94, "59.9 s"}, {59.96, "1 min 0 s"},
		{125.4, "2 min 5 s"}, {3599.4, "59 min 59 s"}, {3599.6, "1 h 0 min"}, {3725, "1 h 2 min"},
		{-0.01, "0 ms"}, // hosts' clocks disagree
	}
	duration := []struct{ in, want string }{
		{"1.000340012s", "1.0 s"}, {"3s", "3.0 s"}, {"0.000001s", "0 ms"}, {"2.812s", "2.8 s"},
		{"1.5s", "1.5 s"}, {"90s", "1 min 30 s"}, {"PT2S", "–"}, {"", "–"},
	}
	stamps := []string{
		"1972-01-01T10:00:20.021Z", "2026-11-25T18:49:51.965287369Z", "2026-11-25T18:49:51Z",
		"2026-11-25T18:49:51.9Z", "2017-01-15T01:30:15.01-08:00", "2026-11-25T18:49:51.123456Z",
	}
	sql := []struct {
		in   string
		want [][2]string
	}{
		{"SELECT country, count(*) AS n FROM customers GROUP BY country ORDER BY 2 DESC", [][2]string{
			{"keyword", "SELECT"}, {"", " country, count(*) "}, {"keyword", "AS"}, {"", " n "}, {"keyword", "FROM"},
			{"", " customers "}, {"keyword", "GROUP"}, {"", " "}, {"keyword", "BY"}, {"", " country "},
			{"keyword", "ORDER"}, {"", " "}, {"keyword", "BY"}, {"", " "}, {"number", "2"}, {"", " "}, {"keyword", "DESC"},
		}},
		// Keywords inside strings, quoted names, comments and longer names stay there.
		{"select order_id, col1, 'it''s from here', \"select\" -- where\nfrom t /* and */", [][2]string{
			{"keyword", "select"}, {"", " order_id, col1, "}, {"string", "'it''s from here'"}, {"", ", "},
			{"string", `"select"`}, {"", " "}, {"comment", "-- where"}, {"", "\n"}, {"keyword", "from"}, {"", " t "},
			{"comment", "/* and */"},
		}},
		{"x = 1.25", [][2]string{{"", "x = "}, {"number", "1.25"}}},
		{"", [][2]string{}},
	}

	in := map[string]any{"human": []float64{}, "duration": []string{}, "at": stamps, "sql": []string{},
		"bytes": jsonCases(sizes), "count": jsonCases(counts), "steps": jsonCases(steps), "diff": jsonCases(diffs), "phases": jsonCases(phases),
		"usage": jsonCases(usages)}
	for _, c := range human {
		in["human"] = append(in["human"].([]float64), c.sec)
	}
	for _, c := range duration {
		in["duration"] = append(in["duration"].([]string), c.in)
	}
	for _, c := range sql {
		in["sql"] = append(in["sql"].([]string), c.in)
	}
	stdin, _ := json.Marshal(in)
	cmd := exec.Command(node, "-e", formatRunner, "console/format.js")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.Bytes())
	}
	var got struct {
		Human, Duration                          []string
		At                                       []int64
		SQL                                      [][][2]string
		Bytes, Count, Steps, Diff, Phases, Usage []json.RawMessage
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for i, c := range human {
		if got.Human[i] != c.want {
			t.Errorf("human(%v) = %q, want %q", c.sec, got.Human[i], c.want)
		}
	}
	for i, c := range duration {
		if got.Duration[i] != c.want {
			t.Errorf("human(seconds(%q)) = %q, want %q", c.in, got.Duration[i], c.want)
		}
	}
	for i, s := range stamps {
		ts, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		if got.At[i] != ts.UnixMilli() {
			t.Errorf("at(%q) = %d, want %d", s, got.At[i], ts.UnixMilli())
		}
	}
	for i, c := range sql {
		if !reflect.DeepEqual(got.SQL[i], c.want) {
			t.Errorf("sqlTokens(%q) =\n%q\nwant\n%q", c.in, got.SQL[i], c.want)
		}
	}
	checkJSON(t, "bytes", sizes, got.Bytes)
	checkJSON(t, "count", counts, got.Count)
	checkJSON(t, "sqlSteps", steps, got.Steps)
	checkJSON(t, "diffTable", diffs, got.Diff)
	checkJSON(t, "intakePhases", phases, got.Phases)
	checkJSON(t, "usageSeries", usages, got.Usage)
	checkEveryStage(t, node)
}

// jsonCase is a case whose input and expected output are JSON.
type jsonCase struct{ in, want string }

var (
	sizes = []jsonCase{
		{`0`, `"0 B"`}, {`98`, `"98 B"`}, {`"98"`, `"98 B"`}, {`1023`, `"1023 B"`}, {`1024`, `"1.0 KiB"`}, {`2458`, `"2.4 KiB"`},
		{`1048524`, `"1023.9 KiB"`}, {`1048575`, `"1.0 MiB"`}, {`10485760`, `"10.0 MiB"`}, {`-1`, `"–"`}, {`"x"`, `"–"`},
	}
	counts = []jsonCase{{`0`, `"0"`}, {`null`, `"0"`}, {`999`, `"999"`}, {`1000`, `"1,000"`}, {`"1234567"`, `"1,234,567"`}}
	steps  = []jsonCase{
		{`["JOB_KIND_READ_SQL", "CONFIRM_USER_SQL"]`, `{"steps": ["database", "method", "question or SQL", "confirm SQL", "job name", "results"], "at": 3, "running": false}`},
		{`["JOB_KIND_READ_SQL", "EXECUTE_SQL"]`, `{"steps": ["database", "method", "question or SQL", "confirm SQL", "job name", "results"], "at": 4, "running": false}`},
		{`["READ_SQL", "DONE"]`, `{"steps": ["database", "method", "question or SQL", "confirm SQL", "job name", "results"], "at": 6, "running": false}`},
		{`["JOB_KIND_UNSPECIFIED", "NEED_CONNECTION"]`, `{"steps": ["database", "method", "question or SQL", "confirm SQL", "job name", "results"], "at": 0, "running": false}`},
		{`["JOB_KIND_WRITE_DATA", "EXECUTING"]`, `{"steps": ["table", "if it exists", "schema", "confirm write", "written"], "at": 4, "running": true}`},
		{`["JOB_KIND_SEND_EMAIL", "CONFIRM_EMAIL"]`, `{"steps": ["query", "recipients", "subject", "confirm e-mail", "sent"], "at": 3, "running": false}`},
		{`["JOB_KIND_COMPARE_SQL", "ASK_COMPARE_KEY"]`, `{"steps": ["first query", "second query", "columns", "key", "report", "target table", "job name", "run", "diff written"], "at": 3, "running": false}`},
		{`["JOB_KIND_COMPARE_SQL", "NEED_WRITE_OR_EMAIL"]`, `{"steps": ["first query", "second query", "columns", "key", "report", "target table", "job name", "run", "diff written"], "at": 8, "running": false}`},
		{`["JOB_KIND_COMPARE_SQL", "CONFIRM_SECOND_GENERATED_SQL"]`, `{"steps": ["first query", "second query", "columns", "key", "report", "target table", "job name", "run", "diff written"], "at": 1, "running": false}`},
		// A stage of another kind, or none, is not a step.
		{`["JOB_KIND_READ_SQL", "ASK_COMPARE_KEY"]`, `null`},
		{`["JOB_KIND_READ_SQL", "NO_SUCH_STAGE"]`, `null`},
		{`["JOB_KIND_OTHER", "NEED_CONNECTION"]`, `null`},
	}
	// COMPARE_SQL results as services/sqlagent writes them (session/diff.go).
	diffs = []jsonCase{
		{ // keyed; the key given
			`[["diff_status", "customer_id", "name_first", "name_second", "country_first", "country_second"],
			  [["changed", 1, "Ava", "Ava", "Australia", "Atlantis"], ["only_in_first", 2, "Liam", null, "Australia", null], ["only_in_second", 99, null, "New", null, "Nowhere"]],
			  ["customer_id"]]`,
			`{"summary": false, "keys": ["customer_id"], "plain": [],
			  "pairs": [{"first": "name_first", "second": "name_second", "name": "name"}, {"first": "country_first", "second": "country_second", "name": "country"}],
			  "rows": [
			    {"status": "changed", "keys": [1], "cells": [{"first": "Ava", "second": "Ava", "changed": false}, {"first": "Australia", "second": "Atlantis", "changed": true}]},
			    {"status": "only_in_first", "keys": [2], "cells": [{"first": "Liam", "second": null, "changed": false}, {"first": "Australia", "second": null, "changed": false}]},
			    {"status": "only_in_second", "keys": [99], "cells": [{"first": null, "second": "New", "changed": false}, {"first": null, "second": "Nowhere", "changed": false}]}],
			  "counts": {"same": 0, "changed": 1, "only_in_first": 1, "only_in_second": 1}}`,
		},
		{ // two key columns, not given: the columns before the pairs; mapped names differ; numbers by value
			`[["diff_status", "region", "year", "amount_first", "total_second"],
			  [["changed", "EU", 2024, 5, "5.00"], ["changed", "US", 2024, 5, 6], ["same", "EU", 2023, 1, 1]], null]`,
			`{"summary": false, "keys": ["region", "year"], "plain": [], "pairs": [{"first": "amount_first", "second": "total_second", "name": "amount"}],
			  "rows": [
			    {"status": "changed", "keys": ["EU", 2024], "cells": [{"first": 5, "second": "5.00", "changed": false}]},
			    {"status": "changed", "keys": ["US", 2024], "cells": [{"first": 5, "second": 6, "changed": true}]},
			    {"status": "same", "keys": ["EU", 2023], "cells": [{"first": 1, "second": 1, "changed": false}]}],
			  "counts": {"same": 1, "changed": 2, "only_in_first": 0, "only_in_second": 0}}`,
		},
		{ // no key: whole rows, each column once
			`[["diff_status", "country", "n"], [["same", "Chile", 1], ["only_in_first", "Peru", 2]], []]`,
			`{"summary": false, "keys": [], "pairs": [], "plain": ["country", "n"],
			  "rows": [{"status": "same", "keys": [], "cells": [{"value": "Chile"}, {"value": 1}]}, {"status": "only_in_first", "keys": [], "cells": [{"value": "Peru"}, {"value": 2}]}],
			  "counts": {"same": 1, "changed": 0, "only_in_first": 1, "only_in_second": 0}}`,
		},
		{ // a summary report
			`[["diff_status", "rows"], [["only_in_first", 2], ["only_in_second", 2], ["same", 57]], null]`,
			`{"summary": true, "keys": [], "pairs": [], "plain": [], "rows": [], "counts": {"same": 57, "changed": 0, "only_in_first": 2, "only_in_second": 2}}`,
		},
		{`[["country", "customers"], [["Chile", 1]], null]`, `null`},
	}
	phases = []jsonCase{
		{ // finished; vision skipped (no images); extraction with an error
			`{"finished": true, "phases": [{"name": "vision_stage1", "duration": "0s", "skipped": "no visual attachments"},
			  {"name": "content_type", "duration": "0.000306737s"}, {"name": "vision_stage2", "duration": "0s", "skipped": "no visual attachments"},
			  {"name": "extraction", "duration": "1.5s", "tokens": "1234", "errors": ["model: deadline exceeded"]},
			  {"name": "indexing", "duration": "0.083s"}, {"name": "routing", "duration": "0.000019s"}]}`,
			`[{"name": "vision_stage1", "label": "vision, stage 1", "state": "skipped", "seconds": 0, "tokens": 0, "errors": [], "skipped": "no visual attachments"},
			  {"name": "content_type", "label": "content type", "state": "done", "seconds": 0.000306737, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "vision_stage2", "label": "vision, stage 2", "state": "skipped", "seconds": 0, "tokens": 0, "errors": [], "skipped": "no visual attachments"},
			  {"name": "extraction", "label": "extraction", "state": "failed", "seconds": 1.5, "tokens": 1234, "errors": ["model: deadline exceeded"], "skipped": ""},
			  {"name": "indexing", "label": "indexing", "state": "done", "seconds": 0.083, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "routing", "label": "routing", "state": "done", "seconds": 0.000019, "tokens": 0, "errors": [], "skipped": ""}]`,
		},
		{ // running: routing is next; a phase this console does not know comes last
			`{"finished": false, "phases": [{"name": "vision_stage1", "duration": "2s", "tokens": 10}, {"name": "content_type", "duration": "0.1s"},
			  {"name": "vision_stage2", "duration": "1s"}, {"name": "extraction", "duration": "0.5s"}, {"name": "indexing", "duration": "0.2s"}, {"name": "ocr_pages", "duration": "3s"}]}`,
			`[{"name": "vision_stage1", "label": "vision, stage 1", "state": "done", "seconds": 2, "tokens": 10, "errors": [], "skipped": ""},
			  {"name": "content_type", "label": "content type", "state": "done", "seconds": 0.1, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "vision_stage2", "label": "vision, stage 2", "state": "done", "seconds": 1, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "extraction", "label": "extraction", "state": "done", "seconds": 0.5, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "indexing", "label": "indexing", "state": "done", "seconds": 0.2, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "routing", "label": "routing", "state": "running", "seconds": null, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "ocr_pages", "label": "ocr pages", "state": "done", "seconds": 3, "tokens": 0, "errors": [], "skipped": ""}]`,
		},
		{ // finished without routing recorded: nothing is running
			`{"finished": true, "phases": [{"name": "indexing", "duration": "0.2s"}]}`,
			`[{"name": "vision_stage1", "label": "vision, stage 1", "state": "pending", "seconds": null, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "content_type", "label": "content type", "state": "pending", "seconds": null, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "vision_stage2", "label": "vision, stage 2", "state": "pending", "seconds": null, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "extraction", "label": "extraction", "state": "pending", "seconds": null, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "indexing", "label": "indexing", "state": "done", "seconds": 0.2, "tokens": 0, "errors": [], "skipped": ""},
			  {"name": "routing", "label": "routing", "state": "pending", "seconds": null, "tokens": 0, "errors": [], "skipped": ""}]`,
		},
	}
)

// GetUsage answers as protojson spells them (int64 as strings): a window
// of three minute buckets, its end inside the last; points outside the
// window are left out.
var usages = []jsonCase{
	{
		`[{"bucketWidth": "60s", "startTime": "2026-11-25T20:00:00Z", "endTime": "2026-11-25T20:02:30.5Z", "points": [
		   {"startTime": "2026-11-25T20:00:00Z", "logicalModel": "chat", "provider": "sim", "tenantId": "acme", "calls": "1", "promptTokens": "10", "completionTokens": "5"},
		   {"startTime": "2026-11-25T20:02:00Z", "logicalModel": "embed", "provider": "sim", "tenantId": "acme", "calls": "2", "promptTokens": "100"},
		   {"startTime": "2026-11-25T20:02:00Z", "logicalModel": "chat", "provider": "deepseek", "tenantId": "other", "calls": "1", "promptTokens": "1", "completionTokens": "1", "reasoningTokens": "1"},
		   {"startTime": "2026-11-25T19:59:00Z", "logicalModel": "chat", "provider": "sim", "tenantId": "acme", "calls": "9", "promptTokens": "900"},
		   {"startTime": "2026-11-25T20:03:00Z", "logicalModel": "chat", "provider": "sim", "tenantId": "acme", "calls": "9", "promptTokens": "900"}]},
		  "logicalModel"]`,
		`{"buckets": [1795636800000, 1795636860000, 1795636920000], "width": 60000, "totals": [15, 0, 102], "max": 102,
		  "series": [{"name": "embed", "total": 100, "calls": 2, "values": [0, 0, 100]}, {"name": "chat", "total": 17, "calls": 2, "values": [15, 0, 2]}]}`,
	},
	{ // by tenant; an hour's buckets; the window's end exactly on a bucket's start
		`[{"bucketWidth": "3600s", "startTime": "2026-11-25T18:00:00Z", "endTime": "2026-11-25T20:00:00Z", "points": [
		   {"startTime": "2026-11-25T19:00:00Z", "logicalModel": "chat", "tenantId": "acme", "calls": "1", "promptTokens": "7"},
		   {"startTime": "2026-11-25T20:00:00Z", "logicalModel": "chat", "tenantId": "none", "calls": "1", "completionTokens": "7"}]},
		  "tenantId"]`,
		`{"buckets": [1795629600000, 1795633200000, 1795636800000], "width": 3600000, "totals": [0, 7, 7], "max": 7,
		  "series": [{"name": "acme", "total": 7, "calls": 1, "values": [0, 7, 0]}, {"name": "none", "total": 7, "calls": 1, "values": [0, 0, 7]}]}`,
	},
	{ // nothing counted
		`[{"bucketWidth": "60s", "startTime": "2026-11-25T20:00:00Z", "endTime": "2026-11-25T20:00:10Z"}, "provider"]`,
		`{"buckets": [1795636800000], "width": 60000, "totals": [0], "max": 0, "series": []}`,
	},
}

// jsonCases is the inputs of cases, for node.
func jsonCases(cases []jsonCase) []json.RawMessage {
	out := make([]json.RawMessage, len(cases))
	for i, c := range cases {
		out[i] = json.RawMessage(c.in)
	}
	return out
}

// checkJSON compares what node returned for each case with its expected
// JSON, as values (key order and spacing aside).
func checkJSON(t *testing.T, fn string, cases []jsonCase, got []json.RawMessage) {
	t.Helper()
	if len(got) != len(cases) {
		t.Fatalf("%s: %d answers for %d cases", fn, len(got), len(cases))
	}
	for i, c := range cases {
		var g, w any
		if err := json.Unmarshal(got[i], &g); err != nil {
			t.Fatalf("%s(%s): %v", fn, c.in, err)
		}
		if err := json.Unmarshal([]byte(c.want), &w); err != nil {
			t.Fatalf("%s case %d: bad want: %v", fn, i, err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("%s(%s) =\n%s\nwant\n%s", fn, c.in, got[i], c.want)
		}
	}
}

// checkEveryStage checks that the console's SQL stepper places every
// stage the SQL agent has (the Stage constants of
// services/sqlagent/internal/session) among the steps of some job kind: a
// stage added there without a place here fails this test.
func checkEveryStage(t *testing.T, node string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "services", "sqlagent", "internal", "session", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("the SQL agent's session package not found beside the gateway: %v", err)
	}
	stageConst := regexp.MustCompile(`\bStage\w*\s+Stage\s*=\s*"([A-Z0-9_]+)"`)
	var stages []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range stageConst.FindAllStringSubmatch(string(src), -1) {
			stages = append(stages, m[1])
		}
	}
	if len(stages) < 30 {
		t.Fatalf("found %d stages in the SQL agent's session package; the pattern no longer matches its constants", len(stages))
	}
	const runner = `
const fs = require("fs"), vm = require("vm");
const ctx = {};
vm.runInNewContext(fs.readFileSync(process.argv[1], "utf8"), ctx);
const stages = JSON.parse(fs.readFileSync(0, "utf8"));
const kinds = ["JOB_KIND_READ_SQL", "JOB_KIND_WRITE_DATA", "JOB_KIND_SEND_EMAIL", "JOB_KIND_COMPARE_SQL"];
process.stdout.write(JSON.stringify(stages.filter((s) => !kinds.some((k) => ctx.sqlSteps(k, s)))));
`
	stdin, _ := json.Marshal(stages)
	cmd := exec.Command(node, "-e", runner, "console/format.js")
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var missing []string
	if err := json.Unmarshal(out, &missing); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(missing) > 0 {
		t.Errorf("the console's SQL stepper (sqlSteps, console/format.js) has no step for the SQL agent's stages %q", missing)
	}
}
