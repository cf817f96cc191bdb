package main

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// event is one Server-Sent Event as an EventSource dispatches it.
type event struct {
	// ID is the last event id at dispatch: it persists from earlier events
	// until an id field changes it.
	ID string
	// Name is the event type; "message" when the event names none.
	Name string
	// Data is the event's data lines joined with "\n".
	Data string
}

// sseReader reads a text/event-stream body one event at a time, parsed as
// the HTML standard's EventSource parses it: lines end in CRLF, LF or CR, a
// leading byte order mark is skipped, comments are dropped, an event with no
// data field is not dispatched, an id holding NUL is ignored, and an event
// cut off by the end of the body is discarded. It pulls rather than pushes
// (unlike httpgatewaytest.Events, which only tests may import) so that the
// caller stamps each event's arrival without a goroutine hop in between.
// Not safe for concurrent use.
type sseReader struct {
	r       *bufio.Reader
	lastID  string
	started bool // the byte order mark check is done
	skipLF  bool // the last line ended in CR: a following LF belongs to it
}

func newSSEReader(body io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(body, 16<<10)}
}

// next returns the next event, or io.EOF at the end of the body (any
// half-received event is dropped, as the standard says), or the read error.
func (s *sseReader) next() (event, error) {
	var (
		name    string
		data    strings.Builder
		hasData bool
	)
	for {
		line, err := s.line()
		if err != nil {
			return event{}, err
		}
		if line == "" {
			if !hasData {
				name = ""
				continue
			}
			ev := event{ID: s.lastID, Name: name, Data: data.String()}
			if ev.Name == "" {
				ev.Name = "message"
			}
			return ev, nil
		}
		if line[0] == ':' {
			continue // a comment, e.g. the gateway's keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			name = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "id":
			if !strings.Contains(value, "\x00") {
				s.lastID = value
			}
		}
	}
}

// line returns the next line without its end. A body that ends inside a
// line gives io.EOF: the event that line belongs to is incomplete.
func (s *sseReader) line() (string, error) {
	if !s.started {
		s.started = true
		if bom, err := s.r.Peek(3); err == nil && string(bom) == "\uFEFF" {
			_, _ = s.r.Discard(3)
		}
	}
	var b []byte
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "", io.EOF
			}
			return "", err
		}
		if s.skipLF {
			s.skipLF = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\n':
			return string(b), nil
		case '\r':
			s.skipLF = true
			return string(b), nil
		}
		b = append(b, c)
	}
}
