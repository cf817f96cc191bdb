package providersim

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
	"unicode"
)

// serveOllamaChat answers POST /api/chat in Ollama's native format.
func (s *Sim) serveOllamaChat(w http.ResponseWriter, hr *http.Request) {
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return
	}
	req := newRequest(hr, raw, true, EndpointChat)
	if req.Body == nil {
		s.record(req, false)
		writeOllamaError(w, http.StatusBadRequest, "invalid character in request body")
		return
	}
	if !s.knownModel(req.Model) {
		s.record(req, false)
		writeOllamaError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", req.Model))
		return
	}
	rp := s.snapshot(s.record(req, true))
	ctx := hr.Context()
	if !wait(ctx, s.opts.Latency) || (rp != nil && !wait(ctx, rp.delay)) {
		return
	}
	if rp != nil && rp.status != 0 && len(rp.raw) == 0 {
		if rp.retryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(int(math.Ceil(rp.retryAfter.Seconds()))))
		}
		writeOllamaError(w, rp.status, rp.errMsg)
		return
	}
	if rp != nil && len(rp.raw) > 0 {
		writeRaw(w, rp, req.Stream, "application/x-ndjson")
		return
	}
	if rp != nil && rp.hang && !req.Stream {
		<-ctx.Done()
		s.noteDisconnect()
		return
	}
	a, err := s.compose(req, rp)
	if err != nil {
		writeOllamaError(w, http.StatusBadRequest, err.Error())
		return
	}
	created := time.Now().UTC().Format(time.RFC3339Nano)
	msg := func(content, thinking string, calls []ToolCall) map[string]any {
		m := map[string]any{"role": "assistant", "content": content}
		if thinking != "" {
			m["thinking"] = thinking
		}
		if len(calls) > 0 {
			var tcs []any
			for i, tc := range calls {
				var args any = map[string]any{}
				_ = json.Unmarshal([]byte(tc.Arguments), &args)
				c := map[string]any{"function": map[string]any{"index": i, "name": tc.Name, "arguments": args}}
				if tc.ID != "" {
					c["id"] = tc.ID
				}
				tcs = append(tcs, c)
			}
			m["tool_calls"] = tcs
		}
		return m
	}
	final := func(m map[string]any) map[string]any {
		return map[string]any{
			"model": req.Model, "created_at": created, "message": m, "done": true, "done_reason": a.finish,
			"total_duration": int64(12_000_000), "load_duration": int64(1_000_000),
			"prompt_eval_count": a.usage.PromptTokens, "prompt_eval_duration": int64(3_000_000),
			"eval_count": a.usage.CompletionTokens, "eval_duration": int64(8_000_000),
		}
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		if rp != nil && rp.cut != 0 {
			writeCutBody(w, rp, jsonBody("", final(msg(a.content, a.reasoning, a.toolCalls))))
			return
		}
		_ = json.NewEncoder(w).Encode(final(msg(a.content, a.reasoning, a.toolCalls)))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	line := func(m map[string]any) map[string]any {
		return map[string]any{"model": req.Model, "created_at": created, "message": m, "done": false}
	}
	var lines []map[string]any
	for _, p := range split(a.reasoning, s.opts.ChunkRunes) {
		lines = append(lines, line(msg("", p, nil)))
	}
	midAt := -1
	for i, p := range split(a.content, s.opts.ChunkRunes) {
		lines = append(lines, line(msg(p, "", nil)))
		if i == 0 {
			midAt = len(lines)
		}
	}
	if len(a.toolCalls) > 0 {
		// Ollama sends the tool calls in a non-final chunk and still ends
		// with done_reason "stop".
		lines = append(lines, line(msg("", "", a.toolCalls)))
	}
	lines = append(lines, final(msg("", "", nil)))
	if midAt < 0 {
		midAt = 1
	}
	enc := json.NewEncoder(w)
	for i, l := range lines {
		// The last line is the done line, which a cut stream never sends.
		if rp != nil && rp.cut != 0 && (i == rp.cutAfter || i == len(lines)-1) {
			s.cutStream(w, rp)
			return
		}
		if i > 0 && !wait(ctx, s.opts.ChunkDelay) {
			s.noteDisconnect()
			return
		}
		if err := enc.Encode(l); err != nil {
			s.noteDisconnect()
			return
		}
		flush(w)
		if rp != nil && rp.midError != "" && i+1 == midAt {
			_ = enc.Encode(map[string]any{"error": rp.midError})
			flush(w)
			return
		}
		if rp != nil && rp.hang && i+1 == midAt {
			<-ctx.Done()
			s.noteDisconnect()
			return
		}
	}
}

// serveOllamaEmbed answers POST /api/embed.
func (s *Sim) serveOllamaEmbed(w http.ResponseWriter, hr *http.Request) {
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return
	}
	req := newRequest(hr, raw, true, EndpointEmbed)
	if !s.knownModel(req.Model) {
		s.record(req, false)
		writeOllamaError(w, http.StatusNotFound, fmt.Sprintf("model %q not found, try pulling it first", req.Model))
		return
	}
	rp := s.snapshot(s.record(req, true))
	if !wait(hr.Context(), s.opts.Latency) || (rp != nil && !wait(hr.Context(), rp.delay)) {
		return
	}
	if rp != nil && rp.status != 0 {
		writeOllamaError(w, rp.status, rp.errMsg)
		return
	}
	dim := s.opts.EmbeddingDim
	if d, ok := req.Body["dimensions"].(float64); ok && d > 0 {
		dim = int(d)
	}
	embs := make([][]float32, 0, len(req.Inputs))
	tokens := 0
	for _, in := range req.Inputs {
		v := Embed(in, dim)
		if rp != nil && rp.embedding != nil {
			v = rp.embedding
		}
		embs = append(embs, v)
		tokens += countTokens(in)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"model": req.Model, "embeddings": embs,
		"total_duration": int64(2_000_000), "load_duration": int64(500_000), "prompt_eval_count": tokens,
	})
}

// serveOllamaTags answers GET /api/tags.
func (s *Sim) serveOllamaTags(w http.ResponseWriter, _ *http.Request) {
	var models []any
	for _, m := range s.listedModels() {
		models = append(models, map[string]any{
			"name": m, "model": m, "modified_at": "2024-01-01T00:00:00Z", "size": 1, "digest": "sim",
			"details": map[string]any{"format": "gguf", "family": "providersim", "parameter_size": "0B", "quantization_level": "none"},
		})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"models": models})
}

func writeOllamaError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg})
}

// Embed returns the simulator's embedding of text: a unit vector of length
// dim built by feature hashing its lower-cased words, so it is
// deterministic, and texts that share words have a positive cosine.
func Embed(text string, dim int) []float32 {
	if dim <= 0 {
		dim = 64
	}
	v := make([]float64, dim)
	words := strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(words) == 0 {
		words = []string{text}
	}
	for _, word := range words {
		h := fnv.New64a()
		_, _ = h.Write([]byte(word))
		sum := h.Sum64()
		sign := 1.0
		if sum>>63 == 1 {
			sign = -1
		}
		v[sum%uint64(dim)] += sign
	}
	var norm float64
	for _, x := range v {
		norm += x * x
	}
	out := make([]float32, dim)
	if norm == 0 {
		out[0] = 1
		return out
	}
	norm = math.Sqrt(norm)
	for i, x := range v {
		out[i] = float32(x / norm)
	}
	return out
}
