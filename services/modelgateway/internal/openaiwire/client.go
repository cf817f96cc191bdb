package openaiwire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/upstream"
)

// Client is a provider on the OpenAI wire: chat, streaming chat, embeddings
// and a model-list probe. Safe for concurrent use.
type Client struct {
	up *upstream.Client
	d  Dialect
}

// New returns a Client sending through up in dialect d.
func New(up *upstream.Client, d Dialect) *Client {
	if d.Provider == "" {
		d.Provider = up.Provider
	}
	return &Client{up: up, d: d}
}

// Dialect returns the client's dialect.
func (c *Client) Dialect() *Dialect { return &c.d }

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// marshal encodes v into a pooled buffer; a *ChatRequest appends itself
// (AppendJSON), anything else goes through encoding/json.
func marshal(v any) (*bytes.Buffer, error) {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	if cr, ok := v.(*ChatRequest); ok {
		b, err := cr.AppendJSON(buf.AvailableBuffer())
		if err != nil {
			bufPool.Put(buf)
			return nil, err
		}
		buf.Write(b)
		return buf, nil
	}
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		bufPool.Put(buf)
		return nil, err
	}
	return buf, nil
}

// decode reads a whole (small, non-streaming) body into a pooled buffer and
// unmarshals it (a *ChatResponse with DecodeChatResponse). Leading blank
// lines, which DeepSeek sends under load, are whitespace to the decoder. A
// body that ends before its JSON value does (or before one begins) is
// reported wrapping io.ErrUnexpectedEOF, apart from malformed JSON, so the
// caller can tell a cut answer from a bad one (upstream.Call.DecodeFail).
func decode(r io.Reader, v any) error {
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer bufPool.Put(buf)
	if _, err := buf.ReadFrom(r); err != nil {
		return err
	}
	if len(bytes.TrimSpace(buf.Bytes())) == 0 {
		return io.EOF
	}
	var err error
	if cr, ok := v.(*ChatResponse); ok {
		err = DecodeChatResponse(buf.Bytes(), cr)
	} else {
		err = json.Unmarshal(buf.Bytes(), v)
	}
	if err != nil && truncated(buf.Bytes()) {
		return fmt.Errorf("answer ends inside its JSON: %w", io.ErrUnexpectedEOF)
	}
	return err
}

// truncated reports whether data is the beginning of a JSON value that
// stops before the value is complete, as json.Decoder tells apart from
// malformed JSON.
func truncated(data []byte) bool {
	var v json.RawMessage
	return errors.Is(json.NewDecoder(bytes.NewReader(data)).Decode(&v), io.ErrUnexpectedEOF)
}

func (c *Client) post(ctx context.Context, path string, v any) (*upstream.Call, error) {
	buf, err := marshal(v)
	if err != nil {
		return nil, llm.Errorf(c.d.Provider, llm.KindInternal, "encode request: %v", err)
	}
	call, err := c.up.Post(ctx, path, buf.Bytes())
	bufPool.Put(buf)
	return call, err
}

// Chat sends a non-streaming request, or, when the dialect requires it
// (Qwen thinking), a streaming one whose events are aggregated.
func (c *Client) Chat(ctx context.Context, req *llm.Request) (*llm.Response, error) {
	if c.d.StreamUnary != nil && c.d.StreamUnary(req) {
		var col llm.Collector
		err := c.Stream(ctx, req, func(ev llm.Event) error { col.Add(ev); return nil })
		if err != nil {
			return nil, err
		}
		resp := col.Response()
		resp.Model = req.Model
		return resp, nil
	}
	wr, err := Encode(req, &c.d, false)
	if err != nil {
		return nil, err
	}
	call, err := c.post(ctx, "/chat/completions", wr)
	if err != nil {
		return nil, err
	}
	defer call.Close()
	call.Unary()
	var cr ChatResponse
	if err := decode(call.Body, &cr); err != nil {
		return nil, call.DecodeFail(err)
	}
	if len(cr.Error) > 0 && string(cr.Error) != "null" {
		return nil, &llm.Error{Provider: c.d.Provider, Kind: llm.KindServer, Message: c.up.Scrub(upstream.ErrorMessage(append([]byte(`{"error":`), append(cr.Error, '}')...)))}
	}
	resp, err := DecodeResponse(c.d.Provider, &cr)
	if err != nil {
		return nil, err
	}
	if resp.Model == "" {
		resp.Model = req.Model
	}
	return resp, nil
}

// Stream sends a streaming request and emits normalised events to sink.
func (c *Client) Stream(ctx context.Context, req *llm.Request, sink llm.Sink) error {
	wr, err := Encode(req, &c.d, true)
	if err != nil {
		return err
	}
	call, err := c.post(ctx, "/chat/completions", wr)
	if err != nil {
		return err
	}
	defer call.Close()
	if err := ParseStream(c.d.Provider, call.Body, call.Progress, call.Fail, sink); err != nil {
		return err
	}
	call.Drain()
	return nil
}

// Embed calls POST /embeddings.
func (c *Client) Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.EmbedResponse, error) {
	if !c.d.Embeddings {
		return nil, llm.Errorf(c.d.Provider, llm.KindUnsupported, "this provider has no embeddings API")
	}
	call, err := c.post(ctx, "/embeddings", &EmbeddingRequest{Model: req.Model, Input: req.Inputs, Dimensions: req.Dimensions, EncodingFormat: "float"})
	if err != nil {
		return nil, err
	}
	defer call.Close()
	call.Unary()
	var er EmbeddingResponse
	if err := decode(call.Body, &er); err != nil {
		return nil, call.DecodeFail(err)
	}
	if len(er.Data) != len(req.Inputs) {
		return nil, llm.Errorf(c.d.Provider, llm.KindBadResponse, "%d embeddings for %d inputs", len(er.Data), len(req.Inputs))
	}
	out := &llm.EmbedResponse{Vectors: make([][]float32, len(req.Inputs)), Usage: ConvertUsage(er.Usage), Model: er.Model}
	for _, d := range er.Data {
		if d.Index < 0 || d.Index >= len(out.Vectors) {
			return nil, llm.Errorf(c.d.Provider, llm.KindBadResponse, "embedding index %d out of range", d.Index)
		}
		out.Vectors[d.Index] = d.Embedding
	}
	if out.Model == "" {
		out.Model = req.Model
	}
	return out, nil
}

// Probe checks that the provider answers GET /models with our credentials.
func (c *Client) Probe(ctx context.Context, _ string) error {
	call, err := c.up.Get(ctx, "/models")
	if err != nil {
		return err
	}
	defer call.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(call.Body, 1<<20))
	return nil
}
