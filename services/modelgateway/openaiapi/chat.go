package openaiapi

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// completion is a chat.completion object.
type completion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []choice     `json:"choices"`
	Usage             *usageFields `json:"usage,omitempty"`
	SystemFingerprint *string      `json:"system_fingerprint"`
}

type choice struct {
	Index        int             `json:"index"`
	Message      responseMessage `json:"message"`
	Logprobs     *struct{}       `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
}

// responseMessage is the assistant's answer. Content is null when the
// turn only called tools, as OpenAI sends it.
type responseMessage struct {
	Role             string     `json:"role"`
	Content          *string    `json:"content"`
	Refusal          *string    `json:"refusal"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []toolCall `json:"tool_calls,omitempty"`
}

type toolCall struct {
	// Index is set in stream deltas only, where clients assemble calls by it.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionCall `json:"function"`
}

type functionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// usageFields is OpenAI's usage object, with the details its SDKs read.
type usageFields struct {
	PromptTokens            int64               `json:"prompt_tokens"`
	CompletionTokens        int64               `json:"completion_tokens"`
	TotalTokens             int64               `json:"total_tokens"`
	PromptTokensDetails     *promptDetails      `json:"prompt_tokens_details,omitempty"`
	CompletionTokensDetails *completionsDetails `json:"completion_tokens_details,omitempty"`
}

type promptDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

type completionsDetails struct {
	ReasoningTokens int64 `json:"reasoning_tokens"`
}

func usageOf(u *modelv1.Usage) *usageFields {
	total := u.GetTotalTokens()
	if total == 0 {
		total = u.GetPromptTokens() + u.GetCompletionTokens()
	}
	return &usageFields{
		PromptTokens: u.GetPromptTokens(), CompletionTokens: u.GetCompletionTokens(), TotalTokens: total,
		PromptTokensDetails:     &promptDetails{CachedTokens: u.GetCacheHitTokens()},
		CompletionTokensDetails: &completionsDetails{ReasoningTokens: u.GetReasoningTokens()},
	}
}

// finishReason names a FinishReason as OpenAI does; running out of
// provider capacity keeps DeepSeek's name, which OpenAI lacks.
func finishReason(f modelv1.FinishReason) string {
	switch f {
	case modelv1.FinishReason_FINISH_REASON_LENGTH:
		return "length"
	case modelv1.FinishReason_FINISH_REASON_TOOL_CALLS:
		return "tool_calls"
	case modelv1.FinishReason_FINISH_REASON_CONTENT_FILTER:
		return "content_filter"
	case modelv1.FinishReason_FINISH_REASON_INSUFFICIENT_RESOURCES:
		return "insufficient_system_resource"
	}
	return "stop"
}

// completionID returns a new chatcmpl- id.
func completionID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "chatcmpl-" + hex.EncodeToString(b[:])
}

// chat serves POST /chat/completions.
func (h *Handler) chat(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	cr, err := decodeChat(body)
	if err != nil {
		h.count(r, "chat", err)
		h.fail(w, r, err)
		return
	}
	if cr.stream {
		h.chatStream(w, r, cr)
		return
	}
	resp, err := h.opts.Client.Chat(h.outgoing(r), cr.req)
	h.count(r, "chat", err)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.usage.add(h.caller(r), resp.GetModel(), resp.GetUsage())
	m := resp.GetMessage()
	msg := responseMessage{Role: "assistant", ReasoningContent: m.GetReasoning()}
	if c := m.GetContent(); c != "" || len(m.GetToolCalls()) == 0 {
		msg.Content = &c
	}
	for _, tc := range m.GetToolCalls() {
		msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: tc.GetId(), Type: "function",
			Function: functionCall{Name: tc.GetName(), Arguments: tc.GetArgumentsJson()}})
	}
	out := completion{
		ID: completionID(), Object: "chat.completion", Created: time.Now().Unix(), Model: cr.req.GetModel(),
		Choices: []choice{{Index: 0, Message: msg, FinishReason: finishReason(resp.GetFinishReason())}},
		Usage:   usageOf(resp.GetUsage()),
	}
	setProvider(w, resp.GetProvider(), resp.GetProviderModel())
	writeJSON(w, out)
}

// setProvider names who answered in response headers, for the caller's
// logs: the body names the logical model the caller asked for.
func setProvider(w http.ResponseWriter, provider, model string) {
	if provider != "" {
		w.Header().Set("X-Agentmesh-Provider", provider)
	}
	if model != "" {
		w.Header().Set("X-Agentmesh-Provider-Model", model)
	}
}

// writeJSON answers 200 with v, and sends it at once: net/http would send
// it only when every handler wrapping this one has returned, after the
// gateway's span, metrics and log line, which the caller need not wait for.
// With its length set the answer still goes out in one write.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, failure{body: apiError{Message: "encoding the response: " + err.Error(), Type: "server_error"}})
		return
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
	_ = http.NewResponseController(w).Flush()
}
