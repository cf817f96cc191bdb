package openaiwire

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// SSEReader reads Server-Sent Events data payloads. Comment lines (":...")
// and blank lines are skipped, "data:" is accepted with or without a
// following space, and the data lines of one event are joined with "\n".
type SSEReader struct {
	r    *bufio.Reader
	data []byte
	line []byte
}

// NewSSEReader reads from r. Call Close when done with it.
func NewSSEReader(r io.Reader) *SSEReader {
	return &SSEReader{r: upstream.AcquireReader(r)}
}

// Close gives the read buffer back for reuse; the data of the last event is
// invalid afterwards. It does not close the underlying reader.
func (s *SSEReader) Close() {
	if s.r != nil {
		upstream.ReleaseReader(s.r)
		s.r = nil
	}
}

// Next returns the next event's data, valid until the following call, or
// io.EOF at the end of the body. An event whose lines all ended before the
// body did is returned even without its closing blank line; a body that
// ends inside a line is cut mid-event, and Next returns an error wrapping
// io.ErrUnexpectedEOF (the SSE standard discards such an event).
func (s *SSEReader) Next() ([]byte, error) {
	s.data = s.data[:0]
	have := false
	for {
		line, err := s.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && have {
				return s.data, nil
			}
			return nil, err
		}
		if len(line) == 0 {
			if have {
				return s.data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue
		}
		payload, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // event:, id:, retry: carry nothing we use
		}
		if len(payload) > 0 && payload[0] == ' ' {
			payload = payload[1:]
		}
		if have {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, payload...)
		have = true
	}
}

// HasLine reports whether a complete line is already buffered, so the next
// read will not wait on the network.
func (s *SSEReader) HasLine() bool {
	n := s.r.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.r.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}

// readLine returns one line without its "\n" or "\r\n".
func (s *SSEReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		s.line = append(s.line[:0], line...)
		for errors.Is(err, bufio.ErrBufferFull) {
			line, err = s.r.ReadSlice('\n')
			s.line = append(s.line, line...)
		}
		line = s.line
	}
	if errors.Is(err, io.EOF) && len(line) > 0 {
		return nil, fmt.Errorf("stream ended inside a line: %w", io.ErrUnexpectedEOF)
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, nil
}

var doneMarker = []byte("[DONE]")

// ParseStream reads an OpenAI-style SSE answer from r and emits normalised
// events to sink: content and reasoning deltas as they come, then the
// complete tool calls in index order, then the end with finish reason and
// usage (read from whichever chunk carried it). progress is called after
// each data event; fail classifies read errors, and a body that ends before
// the answer does (an error wrapping io.ErrUnexpectedEOF).
//
// Deltas that arrived together (already buffered) are merged into one event
// before the parser would wait on the network: no delta is held back, and a
// burst of chunks costs the caller one message instead of many.
func ParseStream(provider string, r io.Reader, progress func(), fail func(error) *llm.Error, sink llm.Sink) error {
	sr := NewSSEReader(r)
	defer sr.Close()
	pending := llm.Coalescer{Sink: sink}
	var (
		asm     Assembler
		finish  string
		gotEnd  bool
		usage   llm.Usage
		chunk   StreamChunk
		sawDone bool
	)
	for {
		if !sr.HasLine() {
			if err := pending.Flush(); err != nil {
				return err
			}
		}
		data, err := sr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			// What did arrive goes to the caller before the failure.
			if ferr := pending.Flush(); ferr != nil {
				return ferr
			}
			return fail(err)
		}
		progress()
		if bytes.Equal(bytes.TrimSpace(data), doneMarker) {
			sawDone = true
			break
		}
		chunk = StreamChunk{}
		if err := DecodeChunk(data, &chunk); err != nil {
			if ferr := pending.Flush(); ferr != nil {
				return ferr
			}
			return llm.Errorf(provider, llm.KindBadResponse, "unparsable stream chunk: %v", err)
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			if err := pending.Flush(); err != nil {
				return err
			}
			return &llm.Error{Provider: provider, Kind: llm.KindServer, Message: "error mid-stream: " + upstream.ErrorMessage(append([]byte(`{"error":`), append(chunk.Error, '}')...))}
		}
		if chunk.Usage != nil {
			usage = ConvertUsage(chunk.Usage)
		}
		for i := range chunk.Choices {
			ch := &chunk.Choices[i]
			if ch.Index != 0 {
				continue
			}
			d := &ch.Delta
			reasoning := d.ReasoningContent
			if reasoning == nil {
				reasoning = d.Reasoning
			}
			if reasoning != nil && *reasoning != "" {
				if err := pending.Add(llm.EventReasoning, *reasoning); err != nil {
					return err
				}
			}
			if d.Content != nil && *d.Content != "" {
				if err := pending.Add(llm.EventContent, *d.Content); err != nil {
					return err
				}
			}
			for j := range d.ToolCalls {
				asm.Add(&d.ToolCalls[j])
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				finish = *ch.FinishReason
				gotEnd = true
			}
		}
	}
	if err := pending.Flush(); err != nil {
		return err
	}
	if !sawDone && !gotEnd {
		return fail(fmt.Errorf("stream ended without data: [DONE] or a finish_reason: %w", io.ErrUnexpectedEOF))
	}
	calls := asm.Calls()
	for _, tc := range calls {
		if err := sink(llm.Event{Kind: llm.EventToolCall, ToolCall: tc}); err != nil {
			return err
		}
	}
	fr := llm.ParseFinish(finish)
	if len(calls) > 0 && (fr == llm.FinishStop || fr == llm.FinishUnspecified) {
		fr = llm.FinishToolCalls
	}
	if fr == llm.FinishUnspecified {
		fr = llm.FinishStop
	}
	return sink(llm.Event{Kind: llm.EventEnd, Finish: fr, Usage: usage})
}
