package main

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// The cases come from the HTML standard's section on parsing an event
// stream (its own examples first), not from this reader.
func TestSSEReaderParsesAsEventSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body string
		want []event
	}{
		{
			name: "the standard's stock example: data lines join with LF",
			body: "data: YHOO\ndata: +2\ndata: 10\n\n",
			want: []event{{Name: "message", Data: "YHOO\n+2\n10"}},
		},
		{
			name: "the standard's id example: a bare id resets the last event id",
			body: ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n",
			want: []event{{ID: "1", Name: "message", Data: "first event"}, {Name: "message", Data: "second event"}, {Name: "message", Data: " third event"}},
		},
		{
			name: "the standard's empty data example: a last event without its blank line is dropped",
			body: "data\n\ndata\ndata\n\ndata:",
			want: []event{{Name: "message", Data: ""}, {Name: "message", Data: "\n"}},
		},
		{
			name: "the standard's space example: one space after the colon is dropped",
			body: "data:test\n\ndata: test\n\n",
			want: []event{{Name: "message", Data: "test"}, {Name: "message", Data: "test"}},
		},
		{
			name: "event names the type; the id persists to later events",
			body: "event: add\nid: 7\ndata: 73857293\n\nevent: remove\ndata: 2153\n\ndata: 113411\n\n",
			want: []event{{ID: "7", Name: "add", Data: "73857293"}, {ID: "7", Name: "remove", Data: "2153"}, {ID: "7", Name: "message", Data: "113411"}},
		},
		{
			name: "CRLF and CR end lines too",
			body: "event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\r\n\n",
			want: []event{{Name: "a", Data: "1"}, {Name: "b", Data: "2"}, {Name: "message", Data: "3"}},
		},
		{
			name: "a leading byte order mark is skipped",
			body: "\uFEFFdata: x\n\n",
			want: []event{{Name: "message", Data: "x"}},
		},
		{
			name: "an id holding NUL is ignored",
			body: "id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n",
			want: []event{{ID: "1", Name: "message", Data: "a"}, {ID: "1", Name: "message", Data: "b"}},
		},
		{
			name: "an event with no data field is not dispatched, and its name does not leak",
			body: "event: lonely\n\ndata: x\n\n: keep-alive\n\n",
			want: []event{{Name: "message", Data: "x"}},
		},
		{
			name: "unknown fields and a line without a colon are ignored",
			body: "retry: 1000\nfoo: bar\nbaz\ndata: x\n\n",
			want: []event{{Name: "message", Data: "x"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newSSEReader(strings.NewReader(tc.body))
			var got []event
			for {
				ev, err := r.next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ev)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}
