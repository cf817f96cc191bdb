package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
	"sigs.k8s.io/yaml"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// jsonOut renders messages as the REST API does: lowerCamelCase names.
var jsonOut = protojson.MarshalOptions{Multiline: true, Indent: "  "}

// emit prints v (a proto message or a plain value) as -o asks: json and
// yaml as data, table through table (nil: json).
func (a *app) emit(v any, table func(w *tabwriter.Writer)) error {
	out := a.io.Out
	if a.output == "table" && table != nil {
		w := tabwriter.NewWriter(&shown{w: out}, 0, 4, 2, ' ', 0)
		table(w)
		return w.Flush()
	}
	b, err := marshalJSON(v)
	if err != nil {
		return err
	}
	if a.output == "yaml" {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = out.Write(y)
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// emitLine prints one streamed item: in json mode one JSON object a line,
// in yaml mode one YAML document each ("---" before it), else through
// text.
func (a *app) emitLine(v any, text func(w io.Writer)) error {
	if a.output == "table" {
		text(a.io.Out)
		return nil
	}
	b, err := marshalJSON(v)
	if err != nil {
		return err
	}
	if a.output == "yaml" {
		y, err := yaml.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.io.Out, "---\n%s", y)
		return err
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.io.Out, compact.String())
	return err
}

// shown writes a table to a terminal: what the mesh stores (a document's
// title, an e-mail's subject, a model's answer) may hold control and
// bidirectional formatting characters, written as escapes (\x1b, \u202e)
// so that they show instead of acting on the terminal; the table's tabs and
// newlines pass, a CRLF as a newline. A character (or CRLF) split between
// writes waits for its rest.
type shown struct {
	w    io.Writer
	rest []byte
}

func (s *shown) Write(p []byte) (int, error) {
	b := append(s.rest, p...)
	cut := len(b)
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				cut = i
			}
			break
		}
	}
	if cut > 0 && b[cut-1] == '\r' {
		cut-- // a CRLF may be split between writes
	}
	s.rest = append([]byte(nil), b[cut:]...)
	text := strings.ReplaceAll(string(b[:cut]), "\r\n", "\n") // a CRLF file's lines stay lines
	_, err := io.WriteString(s.w, utf8x.Escaped(text, '\t', '\n'))
	return len(p), err
}

func marshalJSON(v any) ([]byte, error) {
	if m, ok := v.(proto.Message); ok {
		return jsonOut.Marshal(m)
	}
	return json.MarshalIndent(v, "", "  ")
}

// enumName is an enum value's name without its type prefix, lower case:
// JOB_STATUS_WAITING_FOR_CHILDREN → waiting_for_children.
func enumName(e protoreflect.Enum) string {
	d := e.Descriptor().Values().ByNumber(e.Number())
	if d == nil {
		return fmt.Sprint(e.Number())
	}
	prefix := strings.TrimSuffix(string(e.Descriptor().Values().Get(0).Name()), "UNSPECIFIED")
	return strings.ToLower(strings.TrimPrefix(string(d.Name()), prefix))
}

// parseEnum finds the value named s (running, RUNNING or JOB_STATUS_RUNNING)
// in ed; flag names the option in the error.
func parseEnum(ed protoreflect.EnumDescriptor, flag, s string) (protoreflect.EnumNumber, error) {
	if s == "" {
		return 0, nil
	}
	prefix := strings.TrimSuffix(string(ed.Values().Get(0).Name()), "UNSPECIFIED")
	want := strings.ToUpper(strings.ReplaceAll(s, "-", "_"))
	var names []string
	for i := 1; i < ed.Values().Len(); i++ {
		v := ed.Values().Get(i)
		short := strings.TrimPrefix(string(v.Name()), prefix)
		if want == short || want == string(v.Name()) {
			return v.Number(), nil
		}
		names = append(names, strings.ToLower(short))
	}
	return 0, usagef("%s %q: want one of %s", flag, s, strings.Join(names, ", "))
}

// when prints a timestamp in local time, or "-".
func when(t *timestamppb.Timestamp) string {
	if t == nil {
		return "-"
	}
	return t.AsTime().Local().Format("2006-01-02 15:04:05")
}

// span is the time from start to end (or now), in human units.
func span(start, end *timestamppb.Timestamp) string {
	if start == nil {
		return "-"
	}
	e := time.Now()
	if end != nil {
		e = end.AsTime()
	}
	return human(e.Sub(start.AsTime()))
}

// human prints a duration as people read it: 850 ms, 2.8 s, 3m12s.
func human(d time.Duration) string {
	switch {
	case d < 0:
		return "-"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func humanPB(d *durationpb.Duration) string {
	if d == nil {
		return "-"
	}
	return human(d.AsDuration())
}

// clip shortens s to n runes on one line.
func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// isTerminal reports whether w is a character device (a terminal), where
// a progress line may redraw itself.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// pageFlags adds --limit and --page-token to a list command.
func pageFlags(c *cobra.Command, limit *int32, token *string, what string) {
	*limit = 50
	c.Flags().Var(&boundedInt{p: limit, min: 1, max: 500}, "limit", what+" per page (1 to 500)")
	c.Flags().StringVar(token, "page-token", "", "page to read, from the previous page's last line")
}

// boundedInt is an int32 flag taking whole numbers from min to max: a
// value out of range is a usage error naming the flag (the service's
// refusal named its wire field, pageSize, and exited 6).
type boundedInt struct {
	p        *int32
	min, max int32
}

func (b *boundedInt) String() string {
	if b.p == nil { // pflag asks a zero value, for its help's defaults
		return "0"
	}
	return strconv.Itoa(int(*b.p))
}

func (b *boundedInt) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || int32(n) < b.min || int32(n) > b.max {
		return fmt.Errorf("want a whole number from %d to %d, got %q", b.min, b.max, s)
	}
	*b.p = int32(n)
	return nil
}

func (b *boundedInt) Type() string { return "int" }

// nextPage tells how to read the page after this one, if there is one.
func nextPage(w io.Writer, token string) {
	if token != "" {
		fmt.Fprintf(w, "(more: --page-token %s)\n", token)
	}
}
