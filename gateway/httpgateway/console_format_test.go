package httpgateway_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"reflect"
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

	in := map[string]any{"human": []float64{}, "duration": []string{}, "at": stamps, "sql": []string{}}
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
		Human, Duration []string
		At              []int64
		SQL             [][][2]string
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
}
