package gatewayconn

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// stream is one server stream read as Server-Sent Events. Not safe for
// concurrent use, like a grpc.ClientStream's RecvMsg.
type stream struct {
	conn  *Conn
	ctx   context.Context
	route route
	req   any
	body  io.ReadCloser
	sse   *bufio.Reader
	done  bool
}

var _ grpc.ClientStream = (*stream)(nil)

func (s *stream) Header() (metadata.MD, error) { return metadata.MD{}, nil }
func (s *stream) Trailer() metadata.MD         { return metadata.MD{} }
func (s *stream) CloseSend() error             { return nil }
func (s *stream) Context() context.Context     { return s.ctx }

// SendMsg keeps the request; a server stream has exactly one.
func (s *stream) SendMsg(m any) error {
	if s.req != nil {
		return status.Error(codes.Internal, "a server stream takes one request")
	}
	s.req = m
	return nil
}

// RecvMsg reads the next event into m; io.EOF when the stream ended, the
// error event's status when the stream ended in one.
func (s *stream) RecvMsg(m any) error {
	if s.done {
		return io.EOF
	}
	if s.body == nil {
		if err := s.open(); err != nil {
			s.done = true
			return err
		}
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "reply %T is not a proto message", m)
	}
	ev, err := s.next()
	if err != nil {
		s.finish()
		if errors.Is(err, io.EOF) {
			return io.EOF
		}
		if ctxErr := s.ctx.Err(); ctxErr != nil {
			return status.FromContextError(ctxErr).Err()
		}
		return s.conn.unreachable(err)
	}
	if ev.name == "error" {
		s.finish()
		var e struct {
			Code    int32  `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(ev.data), &e) != nil || e.Code == 0 {
			return status.Errorf(codes.Unknown, "stream error: %s", ev.data)
		}
		return status.Error(codes.Code(e.Code), e.Message)
	}
	if err := decodeEvent(ev, msg); err != nil {
		s.finish()
		return status.Errorf(codes.Internal, "decoding event %q: %v", ev.name, err)
	}
	return nil
}

func (s *stream) open() error {
	req, err := s.conn.request(s.ctx, s.route, s.req, "text/event-stream")
	if err != nil {
		return err
	}
	resp, err := s.conn.do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNoContent {
		resp.Body.Close()
		return io.EOF // a stream that ended before its first event
	}
	s.body = resp.Body
	s.sse = bufio.NewReaderSize(resp.Body, 64<<10)
	return nil
}

func (s *stream) finish() {
	s.done = true
	if s.body != nil {
		s.body.Close()
	}
}

// event is one dispatched Server-Sent Event.
type event struct {
	id, name, data string
}

// next reads one event as the text/event-stream format defines it:
// comment lines (the gateway's keep-alives) skipped, data lines joined with
// "\n", an event without data not dispatched, an unterminated event at the
// end of the body dropped.
func (s *stream) next() (event, error) {
	var ev event
	var data []string
	for {
		line, err := s.sse.ReadString('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return event{}, io.EOF
			}
			return event{}, err
		}
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		if line == "" {
			if data == nil {
				ev = event{}
				continue
			}
			ev.data = strings.Join(data, "\n")
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			ev.name = value
		case "id":
			ev.id = value
		case "data":
			data = append(data, value)
		}
	}
}

// decodeEvent is the inverse of the gateway's SSE encoding (see
// gateway/httpgateway/sse.go): a message with a oneof gets the case its
// event names, with the data as that case's value; a message holding one
// event field gets the data there; anything else is the data itself. The
// event id, a sequence number, goes to the sequence field where there is
// one.
func decodeEvent(ev event, m proto.Message) error {
	rm := m.ProtoReflect()
	d := rm.Descriptor()
	if ods := d.Oneofs(); ods.Len() > 0 && ev.name != "" {
		fields := ods.Get(0).Fields()
		for i := range fields.Len() {
			fd := fields.Get(i)
			if string(fd.Name()) == ev.name || upperCamel(string(fd.Name())) == ev.name {
				if err := unmarshal.Unmarshal([]byte(`{"`+fd.JSONName()+`":`+ev.data+`}`), m); err != nil {
					return err
				}
				setSequence(ev, rm)
				return nil
			}
		}
	}
	target := rm
	if fd := d.Fields().ByName("event"); fd != nil && fd.Message() != nil {
		target = rm.Mutable(fd).Message()
	}
	if err := unmarshal.Unmarshal([]byte(ev.data), target.Interface()); err != nil {
		return err
	}
	setSequence(ev, rm, target)
	return nil
}

// setSequence sets the event's id (the SSE id: its sequence) in the first
// of ms with a sequence field, as the gRPC stream carries it.
func setSequence(ev event, ms ...protoreflect.Message) {
	if seq, err := strconv.ParseUint(ev.id, 10, 64); err == nil {
		for _, r := range ms {
			if fd := r.Descriptor().Fields().ByName("sequence"); fd != nil && fd.Kind() == protoreflect.Uint64Kind {
				r.Set(fd, protoreflect.ValueOfUint64(seq))
				return
			}
		}
	}
}

// upperCamel turns response_chunk into ResponseChunk, as the chat stream
// names its events.
func upperCamel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}
