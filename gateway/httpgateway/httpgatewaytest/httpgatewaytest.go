// Package httpgatewaytest serves the real REST/SSE gateway in front of
// services a test started, and reads its Server-Sent Events the way a
// browser's EventSource does, so that services' tests can drive them as an
// HTTP client would.
//
// Only test code imports this package.
package httpgatewaytest

import (
	"bufio"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Start serves httpgateway.Handler with cfg on a loopback httptest server
// and returns its base URL. Backends left nil lead to an address nobody
// serves (their routes answer 503). Everything stops in t.Cleanup.
func Start(t testing.TB, cfg httpgateway.Config, backends httpgateway.Backends) string {
	t.Helper()
	return StartOn(t, nil, cfg, backends)
}

// StartOn is Start on lis, a listener whose address the test knew before
// (to name the gateway's replicas in cfg, say); nil opens one.
func StartOn(t testing.TB, lis net.Listener, cfg httpgateway.Config, backends httpgateway.Backends) string {
	t.Helper()
	var nobody *grpc.ClientConn
	for _, b := range []**grpc.ClientConn{&backends.Model, &backends.Orchestrator, &backends.Vision, &backends.Indexer, &backends.Classifier, &backends.SQLAgent} {
		if *b != nil {
			continue
		}
		if nobody == nil {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := lis.Addr().String()
			_ = lis.Close()
			nobody = Dial(t, addr)
		}
		*b = nobody
	}
	h, err := httpgateway.Handler(&cfg, backends, nil, nil)
	if err != nil {
		t.Fatalf("httpgateway.Handler: %v", err)
	}
	srv := httptest.NewUnstartedServer(h)
	if lis != nil {
		_ = srv.Listener.Close()
		srv.Listener = lis
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// Dial connects to a service's gRPC address the way the gateway does; the
// connection closes in t.Cleanup.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Event is one Server-Sent Event as an EventSource dispatches it, or a
// comment line (Comment set, the rest empty).
type Event struct {
	// ID is the last event id at dispatch: it persists from earlier events
	// until an id field changes it.
	ID string
	// OwnID is set when the event carried an id field of its own (a
	// server that could not store an event sends it without one, and the
	// ID above is then an earlier event's).
	OwnID bool
	// Name is the event type; "message" when the event names none.
	Name string
	// Data is the event's data lines joined with "\n".
	Data string
	// Comment is the text of a comment line, such as "keep-alive".
	Comment string
}

// Events parses a text/event-stream body as the HTML standard's
// EventSource does (lines end in CRLF, LF or CR; an id holding NUL is
// ignored), sending each event as soon as its blank line arrives and each
// comment at once. The channel closes at the end of the body; its reader
// must drain it or close the body.
func Events(body io.Reader) <-chan Event {
	out := make(chan Event, 64)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		sc.Split(splitLines)
		var (
			name, lastID string
			data         []string
			ownID        bool
		)
		for sc.Scan() {
			line := sc.Text()
			if line == "" {
				if data != nil {
					ev := Event{ID: lastID, OwnID: ownID, Name: name, Data: strings.Join(data, "\n")}
					if ev.Name == "" {
						ev.Name = "message"
					}
					out <- ev
				}
				name, data, ownID = "", nil, false
				continue
			}
			if comment, ok := strings.CutPrefix(line, ":"); ok {
				out <- Event{Comment: strings.TrimSpace(comment)}
				continue
			}
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				name = value
			case "data":
				data = append(data, value)
			case "id":
				if !strings.Contains(value, "\x00") {
					lastID, ownID = value, true
				}
			}
		}
	}()
	return out
}

// splitLines splits at CRLF, LF or CR, as the event-stream format allows.
func splitLines(data []byte, atEOF bool) (int, []byte, error) {
	for i, c := range data {
		switch c {
		case '\n':
			return i + 1, data[:i], nil
		case '\r':
			if i+1 < len(data) {
				if data[i+1] == '\n' {
					return i + 2, data[:i], nil
				}
				return i + 1, data[:i], nil
			}
			if atEOF {
				return i + 1, data[:i], nil
			}
			return 0, nil, nil // the next byte decides whether this is CRLF
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}
