package providersim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// serveOpenAIChat answers POST /chat/completions in the OpenAI-style dialect.
func (s *Sim) serveOpenAIChat(w http.ResponseWriter, hr *http.Request) {
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return
	}
	if !s.authorized(hr) {
		key, _ := strings.CutPrefix(hr.Header.Get("Authorization"), "Bearer ")
		// Echo the key the way some providers do, so clients must scrub it.
		s.record(newRequest(hr, raw, false, EndpointChat), false)
		writeOpenAIError(w, http.StatusUnauthorized, "Authentication Fails, Your api key: "+key+" is invalid", "authentication_error", "invalid_api_key", 0)
		return
	}
	req := newRequest(hr, raw, false, EndpointChat)
	if req.Body == nil {
		s.record(req, false)
		writeOpenAIError(w, http.StatusBadRequest, "Failed to deserialize the JSON body into the target type", "invalid_request_error", "invalid_request_error", 0)
		return
	}
	if status, msg, code := s.validateOpenAI(req); status != 0 {
		s.record(req, false)
		writeOpenAIError(w, status, msg, "invalid_request_error", code, 0)
		return
	}
	rp := s.snapshot(s.record(req, true))
	ctx := hr.Context()
	if !wait(ctx, s.opts.Latency) || (rp != nil && !wait(ctx, rp.delay)) {
		return
	}
	if rp != nil && rp.status != 0 && len(rp.raw) == 0 {
		code := rp.errCode
		if code == "" {
			code = http.StatusText(rp.status)
		}
		writeOpenAIError(w, rp.status, rp.errMsg, errorType(rp.status), code, rp.retryAfter)
		return
	}
	if rp != nil && len(rp.raw) > 0 {
		writeRaw(w, rp, req.Stream, "text/event-stream")
		return
	}
	if rp != nil && rp.hang && !req.Stream {
		<-ctx.Done()
		s.noteDisconnect()
		return
	}
	a, err := s.compose(req, rp)
	if err != nil {
		writeOpenAIError(w, http.StatusBadRequest, err.Error(), "invalid_request_error", "invalid_request_error", 0)
		return
	}
	if req.Stream {
		s.streamOpenAI(w, hr, req, rp, a)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	blank := strings.Repeat("\n", max(s.opts.Faults.BlankLinesBeforeJSON, 0))
	if rp == nil || rp.cut == 0 {
		w.WriteHeader(http.StatusOK)
		if blank != "" {
			_, _ = io.WriteString(w, blank)
			flush(w)
		}
	}
	msg := map[string]any{"role": "assistant", "content": a.content}
	if a.reasoning != "" {
		msg[s.reasoningField()] = a.reasoning
	}
	if len(a.toolCalls) > 0 {
		var calls []any
		for i, tc := range a.toolCalls {
			calls = append(calls, map[string]any{
				"id": toolID(req, tc, i), "type": "function",
				"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments},
			})
		}
		msg["tool_calls"] = calls
	}
	body := map[string]any{
		"id": fmt.Sprintf("chatcmpl-sim-%d", req.Seq), "object": "chat.completion",
		"created": time.Now().Unix(), "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": a.finish}},
		"usage":   s.openAIUsage(a.usage),
	}
	if rp != nil && rp.cut != 0 {
		writeCutBody(w, rp, jsonBody(blank, body))
		return
	}
	_ = json.NewEncoder(w).Encode(body)
}

// validateOpenAI applies the provider's request checks (faults and models).
func (s *Sim) validateOpenAI(r *Request) (status int, msg, code string) {
	f := s.opts.Faults
	if !s.knownModel(r.Model) {
		return http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", r.Model), "model_not_found"
	}
	if f.RejectToolChoice && r.ToolChoice != nil {
		return http.StatusBadRequest, "tool_choice is not supported", "invalid_request_error"
	}
	if f.RequireJSONWordInPrompt && r.JSONMode == "json_object" && !containsFold(r.AllText(), "json") {
		return http.StatusBadRequest, "Prompt must contain the word 'json' in some form to use 'response_format' of type 'json_object'.", "invalid_request_error"
	}
	if f.RejectNonStreamingThinking && r.Thinking && !r.Stream {
		return http.StatusBadRequest, "parameter.enable_thinking must be set to false for non-streaming calls", "invalid_parameter_error"
	}
	for i, m := range r.Messages {
		if f.RejectReasoningInHistory && m.HasReasoningField {
			return http.StatusBadRequest, fmt.Sprintf("The reasoning_content is an intermediate result for display purposes only and will not be included in the context for inference. Please remove the reasoning_content from your message (messages[%d]).", i), "invalid_request_error"
		}
		if f.RequireReasoningAfterToolCalls && m.Role == "assistant" && len(m.ToolCalls) > 0 && m.Reasoning == "" {
			return http.StatusBadRequest, fmt.Sprintf("Missing `reasoning_content` field in the assistant message at message index %d.", i), "invalid_request_error"
		}
	}
	return 0, "", ""
}

// streamOpenAI writes a as SSE chunks.
func (s *Sim) streamOpenAI(w http.ResponseWriter, hr *http.Request, req *Request, rp *reply, a *answer) {
	f := s.opts.Faults
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	sw := &sseWriter{w: w, noSpace: f.DataWithoutSpace}
	for i := 0; i < f.KeepAliveComments; i++ {
		sw.line(": keep-alive\n\n")
	}
	sw.flush()
	id := fmt.Sprintf("chatcmpl-sim-%d", req.Seq)
	created := time.Now().Unix()
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}},
		}
		if s.opts.Flavor == Qwen && req.IncludeUsage {
			c["usage"] = nil
		}
		return c
	}
	var events []map[string]any
	events = append(events, chunk(map[string]any{"role": "assistant", "content": ""}, nil))
	for _, piece := range split(a.reasoning, s.opts.ChunkRunes) {
		events = append(events, chunk(map[string]any{"content": nil, s.reasoningField(): piece}, nil))
	}
	contentPieces := split(a.content, s.opts.ChunkRunes)
	midAt := -1
	for i, piece := range contentPieces {
		events = append(events, chunk(map[string]any{"content": piece}, nil))
		if i == 0 {
			midAt = len(events)
		}
	}
	for _, d := range s.toolDeltas(req, a.toolCalls) {
		events = append(events, chunk(map[string]any{"tool_calls": []any{d}}, nil))
	}
	final := chunk(map[string]any{}, a.finish)
	usage := s.openAIUsage(a.usage)
	if req.IncludeUsage && f.UsageWithChoices {
		final["usage"] = usage
	}
	events = append(events, final)
	if req.IncludeUsage && !f.UsageWithChoices {
		events = append(events, map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{}, "usage": usage,
		})
	}
	if midAt < 0 {
		midAt = 1
	}
	ctx := hr.Context()
	for i, ev := range events {
		if rp != nil && rp.cut != 0 && i == rp.cutAfter {
			s.cutStream(w, rp)
			return
		}
		if i > 0 && !wait(ctx, s.opts.ChunkDelay) {
			s.noteDisconnect()
			return
		}
		if err := sw.event(ev); err != nil {
			s.noteDisconnect()
			return
		}
		if rp != nil && rp.midError != "" && i+1 == midAt {
			_ = sw.event(map[string]any{"error": map[string]any{"message": rp.midError, "type": "server_error", "code": "internal_error"}})
			return
		}
		if rp != nil && rp.hang && i+1 == midAt {
			<-ctx.Done()
			s.noteDisconnect()
			return
		}
	}
	if rp != nil && rp.cut != 0 {
		s.cutStream(w, rp)
		return
	}
	sw.line("data: [DONE]\n\n")
	sw.flush()
}

// toolDeltas turns calls into OpenAI-style tool-call deltas, with the
// configured quirks.
func (s *Sim) toolDeltas(req *Request, calls []ToolCall) []map[string]any {
	f := s.opts.Faults
	perCall := make([][]map[string]any, len(calls))
	for i, tc := range calls {
		id := toolID(req, tc, i)
		pieces := []string{tc.Arguments}
		if !f.ToolArgsInOneChunk {
			pieces = splitBytes(tc.Arguments, 3)
		}
		first := map[string]any{"index": i, "id": id, "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""}}
		if f.ToolArgsInOneChunk {
			first["function"].(map[string]any)["arguments"] = tc.Arguments
			pieces = nil
		}
		perCall[i] = append(perCall[i], first)
		for _, p := range pieces {
			d := map[string]any{"index": i, "function": map[string]any{"arguments": p}}
			switch {
			case f.RepeatToolIDs:
				d["id"] = id
				d["type"] = "function"
				d["function"].(map[string]any)["name"] = tc.Name
			case f.EmptyIDsOnLaterToolDeltas:
				d["id"] = ""
				d["type"] = "function"
				d["function"].(map[string]any)["name"] = nil
			}
			perCall[i] = append(perCall[i], d)
		}
	}
	var out []map[string]any
	if f.InterleaveToolDeltas {
		for step := 0; ; step++ {
			any := false
			for i := range perCall {
				if step < len(perCall[i]) {
					out = append(out, perCall[i][step])
					any = true
				}
			}
			if !any {
				break
			}
		}
		return out
	}
	for i := range perCall {
		out = append(out, perCall[i]...)
	}
	return out
}

// splitBytes cuts s into about n pieces (the last may be longer).
func splitBytes(s string, n int) []string {
	if len(s) <= n {
		return []string{s}
	}
	size := int(math.Ceil(float64(len(s)) / float64(n)))
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

func toolID(req *Request, tc ToolCall, i int) string {
	if tc.ID != "" {
		return tc.ID
	}
	return fmt.Sprintf("call_sim_%d_%d", req.Seq, i)
}

func (s *Sim) reasoningField() string {
	if s.opts.Flavor == Ollama {
		return "reasoning"
	}
	return "reasoning_content"
}

func (s *Sim) openAIUsage(u Usage) map[string]any {
	out := map[string]any{
		"prompt_tokens":     u.PromptTokens,
		"completion_tokens": u.CompletionTokens,
		"total_tokens":      u.PromptTokens + u.CompletionTokens,
	}
	switch s.opts.Flavor {
	case DeepSeek:
		out["prompt_cache_hit_tokens"] = u.CacheHitTokens
		out["prompt_cache_miss_tokens"] = u.PromptTokens - u.CacheHitTokens
		out["completion_tokens_details"] = map[string]any{"reasoning_tokens": u.ReasoningTokens}
	case Qwen, OpenAI:
		out["prompt_tokens_details"] = map[string]any{"cached_tokens": u.CacheHitTokens}
		out["completion_tokens_details"] = map[string]any{"reasoning_tokens": u.ReasoningTokens}
	}
	return out
}

func errorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func writeOpenAIError(w http.ResponseWriter, status int, msg, typ, code string, retryAfter time.Duration) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": code},
	})
}

func writeRaw(w http.ResponseWriter, rp *reply, stream bool, streamType string) {
	if stream {
		w.Header().Set("Content-Type", streamType)
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	status := rp.status
	if status == 0 {
		status = http.StatusOK
	}
	if rp.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(rp.retryAfter.Seconds()))))
	}
	w.WriteHeader(status)
	for _, l := range rp.raw {
		_, _ = io.WriteString(w, l+"\n")
		flush(w)
	}
}

// serveOpenAIEmbeddings answers POST /embeddings.
func (s *Sim) serveOpenAIEmbeddings(w http.ResponseWriter, hr *http.Request) {
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		return
	}
	req := newRequest(hr, raw, false, EndpointEmbed)
	if !s.authorized(hr) {
		s.record(req, false)
		writeOpenAIError(w, http.StatusUnauthorized, "invalid api key", "authentication_error", "invalid_api_key", 0)
		return
	}
	if !s.knownModel(req.Model) {
		s.record(req, false)
		writeOpenAIError(w, http.StatusNotFound, fmt.Sprintf("The model `%s` does not exist", req.Model), "invalid_request_error", "model_not_found", 0)
		return
	}
	if len(req.Inputs) == 0 {
		s.record(req, false)
		writeOpenAIError(w, http.StatusBadRequest, "input must not be empty", "invalid_request_error", "invalid_parameter", 0)
		return
	}
	rp := s.snapshot(s.record(req, true))
	if !wait(hr.Context(), s.opts.Latency) || (rp != nil && !wait(hr.Context(), rp.delay)) {
		return
	}
	if rp != nil && rp.status != 0 {
		writeOpenAIError(w, rp.status, rp.errMsg, errorType(rp.status), rp.errCode, rp.retryAfter)
		return
	}
	dim := s.opts.EmbeddingDim
	if d, ok := req.Body["dimensions"].(float64); ok && d > 0 {
		dim = int(d)
	}
	var data []any
	tokens := 0
	for i, in := range req.Inputs {
		vec := Embed(in, dim)
		if rp != nil && rp.embedding != nil {
			vec = rp.embedding
		}
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": vec})
		tokens += countTokens(in)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list", "data": data, "model": req.Model,
		"usage": map[string]any{"prompt_tokens": tokens, "total_tokens": tokens},
	})
}

// serveOpenAIModels answers GET /models.
func (s *Sim) serveOpenAIModels(w http.ResponseWriter, hr *http.Request) {
	if !s.authorized(hr) {
		writeOpenAIError(w, http.StatusUnauthorized, "invalid api key", "authentication_error", "invalid_api_key", 0)
		return
	}
	var data []any
	for _, m := range s.listedModels() {
		data = append(data, map[string]any{"id": m, "object": "model", "owned_by": "providersim"})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// sseWriter writes Server-Sent Events.
type sseWriter struct {
	w       http.ResponseWriter
	noSpace bool
}

func (s *sseWriter) line(l string) { _, _ = io.WriteString(s.w, l) }

func (s *sseWriter) flush() { flush(s.w) }

func (s *sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	prefix := "data: "
	if s.noSpace {
		prefix = "data:"
	}
	if _, err := io.WriteString(s.w, prefix+string(b)+"\n\n"); err != nil {
		return err
	}
	return http.NewResponseController(s.w).Flush()
}

func flush(w http.ResponseWriter) { _ = http.NewResponseController(w).Flush() }
