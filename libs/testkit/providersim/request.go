package providersim

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Request is one recorded request: the wire as received, and a
// provider-neutral view of it.
type Request struct {
	// Seq is the arrival number, from 1.
	Seq int
	// Method and Path are the HTTP method and URL path.
	Method, Path string
	// Header holds the request headers.
	Header http.Header
	// Raw is the body as received.
	Raw []byte
	// Body is Raw decoded as a JSON object (nil if it was not one).
	Body map[string]any
	// Native is true for Ollama's native API (/api/...).
	Native bool
	// Endpoint is the request kind.
	Endpoint Endpoint
	// Rule names the rule that answered ("" for the default answer).
	Rule string

	// Model is the requested model id.
	Model string
	// Stream is true for a streaming request (Ollama native: stream defaults
	// to true).
	Stream bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// Messages are the chat messages.
	Messages []Message
	// Tools are the offered tool names, in order.
	Tools []string
	// ToolChoice is tool_choice as sent (a string or an object), nil if absent.
	ToolChoice any
	// JSONMode is "json_object", "json_schema" (OpenAI-style response_format)
	// or "format" (Ollama), empty for text.
	JSONMode string
	// Schema is the JSON schema that travelled natively, if any.
	Schema map[string]any
	// Thinking is true when the request turned thinking on (DeepSeek
	// thinking.type "enabled", Qwen enable_thinking, OpenAI reasoning_effort,
	// Ollama think).
	Thinking bool
	// Inputs are the texts of an embedding request.
	Inputs []string
}

// Message is one chat message as sent.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string
	// Content is the text (text parts joined with "\n").
	Content string
	// Images are the images as sent: data URIs (OpenAI-style image_url
	// parts) or base64 strings (Ollama images).
	Images []string
	// Reasoning is reasoning_content (or "reasoning", or Ollama "thinking").
	Reasoning string
	// HasReasoningField is true when the reasoning field was present at all.
	HasReasoningField bool
	// ToolCalls are the assistant's tool calls; Arguments holds JSON text
	// (Ollama's argument objects re-encoded).
	ToolCalls []ToolCall
	// ToolCallID is tool_call_id (OpenAI-style tool results).
	ToolCallID string
	// ToolName is tool_name (Ollama tool results).
	ToolName string
}

// LastUserText returns the text of the last user message.
func (r *Request) LastUserText() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// HasTool reports whether a tool of this name was offered.
func (r *Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// AllText returns every message's text joined with newlines.
func (r *Request) AllText() string {
	var b strings.Builder
	for _, m := range r.Messages {
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}

func newRequest(hr *http.Request, raw []byte, native bool, ep Endpoint) *Request {
	r := &Request{
		Method: hr.Method, Path: hr.URL.Path, Header: hr.Header.Clone(), Raw: raw,
		Native: native, Endpoint: ep,
	}
	var body map[string]any
	if json.Unmarshal(raw, &body) == nil {
		r.Body = body
	}
	r.Model, _ = body["model"].(string)
	if ep == EndpointEmbed {
		switch in := body["input"].(type) {
		case string:
			r.Inputs = []string{in}
		case []any:
			for _, v := range in {
				s, _ := v.(string)
				r.Inputs = append(r.Inputs, s)
			}
		}
		return r
	}
	if native {
		parseOllama(r, body)
	} else {
		parseOpenAI(r, body)
	}
	return r
}

func parseOpenAI(r *Request, body map[string]any) {
	r.Stream, _ = body["stream"].(bool)
	if so, ok := body["stream_options"].(map[string]any); ok {
		r.IncludeUsage, _ = so["include_usage"].(bool)
	}
	msgs, _ := body["messages"].([]any)
	for _, mv := range msgs {
		m, _ := mv.(map[string]any)
		msg := Message{}
		msg.Role, _ = m["role"].(string)
		switch c := m["content"].(type) {
		case string:
			msg.Content = c
		case []any:
			var texts []string
			for _, pv := range c {
				p, _ := pv.(map[string]any)
				switch p["type"] {
				case "text":
					t, _ := p["text"].(string)
					texts = append(texts, t)
				case "image_url":
					iu, _ := p["image_url"].(map[string]any)
					u, _ := iu["url"].(string)
					msg.Images = append(msg.Images, u)
				}
			}
			msg.Content = strings.Join(texts, "\n")
		}
		for _, key := range []string{"reasoning_content", "reasoning"} {
			if v, ok := m[key]; ok {
				msg.HasReasoningField = true
				s, _ := v.(string)
				msg.Reasoning = s
			}
		}
		tcs, _ := m["tool_calls"].([]any)
		for _, tv := range tcs {
			tc, _ := tv.(map[string]any)
			fn, _ := tc["function"].(map[string]any)
			call := ToolCall{}
			call.ID, _ = tc["id"].(string)
			call.Name, _ = fn["name"].(string)
			call.Arguments, _ = fn["arguments"].(string)
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		msg.ToolCallID, _ = m["tool_call_id"].(string)
		r.Messages = append(r.Messages, msg)
	}
	r.Tools = toolNames(body)
	r.ToolChoice = body["tool_choice"]
	if rf, ok := body["response_format"].(map[string]any); ok {
		switch rf["type"] {
		case "json_object":
			r.JSONMode = "json_object"
		case "json_schema":
			r.JSONMode = "json_schema"
			js, _ := rf["json_schema"].(map[string]any)
			r.Schema, _ = js["schema"].(map[string]any)
		}
	}
	if th, ok := body["thinking"].(map[string]any); ok && th["type"] == "enabled" {
		r.Thinking = true
	}
	if et, ok := body["enable_thinking"].(bool); ok && et {
		r.Thinking = true
	}
	if re, ok := body["reasoning_effort"].(string); ok && re != "" && re != "none" {
		r.Thinking = true
	}
}

func parseOllama(r *Request, body map[string]any) {
	r.Stream = true
	if s, ok := body["stream"].(bool); ok {
		r.Stream = s
	}
	r.IncludeUsage = true // Ollama always reports counts on the final line
	msgs, _ := body["messages"].([]any)
	for _, mv := range msgs {
		m, _ := mv.(map[string]any)
		msg := Message{}
		msg.Role, _ = m["role"].(string)
		msg.Content, _ = m["content"].(string)
		if imgs, ok := m["images"].([]any); ok {
			for _, iv := range imgs {
				s, _ := iv.(string)
				msg.Images = append(msg.Images, s)
			}
		}
		if v, ok := m["thinking"]; ok {
			msg.HasReasoningField = true
			msg.Reasoning, _ = v.(string)
		}
		tcs, _ := m["tool_calls"].([]any)
		for _, tv := range tcs {
			tc, _ := tv.(map[string]any)
			fn, _ := tc["function"].(map[string]any)
			call := ToolCall{}
			call.ID, _ = tc["id"].(string)
			call.Name, _ = fn["name"].(string)
			args, _ := json.Marshal(fn["arguments"])
			call.Arguments = string(args)
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		msg.ToolName, _ = m["tool_name"].(string)
		r.Messages = append(r.Messages, msg)
	}
	r.Tools = toolNames(body)
	switch f := body["format"].(type) {
	case string:
		if f != "" {
			r.JSONMode = "format"
		}
	case map[string]any:
		r.JSONMode = "format"
		r.Schema = f
	}
	switch t := body["think"].(type) {
	case bool:
		r.Thinking = t
	case string:
		r.Thinking = t != ""
	}
}

func toolNames(body map[string]any) []string {
	var out []string
	tools, _ := body["tools"].([]any)
	for _, tv := range tools {
		t, _ := tv.(map[string]any)
		fn, _ := t["function"].(map[string]any)
		if name, ok := fn["name"].(string); ok {
			out = append(out, name)
		}
	}
	return out
}
