package openaiwire

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/structured"
)

// Dialect is what one provider does differently on the OpenAI wire.
type Dialect struct {
	// Provider names the provider in errors.
	Provider string
	// NativeSchema sends response_format json_schema; otherwise JSON schema
	// requests go as json_object with the schema in a system prompt.
	NativeSchema bool
	// NoToolChoice never sends tool_choice (Ollama /v1 rejects it); "none"
	// then drops the tools and a named choice offers only that tool.
	NoToolChoice bool
	// NoRequiredToolChoice sends "auto" where "required" was asked.
	NoRequiredToolChoice bool
	// Images accepts image parts; without it, a request with images fails
	// with llm.KindUnsupported (so the dispatcher moves on to the next target).
	Images bool
	// TopK and Seed send those sampling fields; other providers drop them.
	TopK, Seed bool
	// Replay is the reasoning replay policy when the route sets none.
	Replay llm.ReasoningReplay
	// Thinking writes the thinking options in the provider's fields.
	Thinking func(t llm.Thinking, out *ChatRequest)
	// StreamUnary reports whether a non-streaming call must be streamed
	// upstream and aggregated (Qwen with thinking on).
	StreamUnary func(req *llm.Request) bool
	// Embeddings says whether the provider serves /embeddings.
	Embeddings bool
}

// Encode builds the wire request for req. stream asks for SSE with usage.
func Encode(req *llm.Request, d *Dialect, stream bool) (*ChatRequest, error) {
	out := &ChatRequest{
		Model:       req.Model,
		Temperature: req.Options.Temperature,
		TopP:        req.Options.TopP,
		MaxTokens:   req.Options.MaxTokens,
		Stop:        req.Options.Stop,
		Extra:       req.Extra,
	}
	if d.TopK {
		out.TopK = req.Options.TopK
	}
	if d.Seed {
		out.Seed = req.Options.Seed
	}
	if stream {
		out.Stream = true
		out.StreamOptions = &StreamOptions{IncludeUsage: true}
	}
	replay := req.Replay
	if replay == llm.ReplayDefault {
		replay = d.Replay
	}

	rf := req.ResponseFormat
	instruction := ""
	switch rf.Type {
	case llm.FormatJSONObject:
		out.ResponseFormat = &ResponseFormat{Type: "json_object"}
		if !mentionsJSON(req.Messages) {
			instruction = structured.Instruction(rf)
		}
	case llm.FormatJSONSchema:
		if d.NativeSchema {
			name := rf.Name
			if name == "" {
				name = "response"
			}
			out.ResponseFormat = &ResponseFormat{Type: "json_schema", JSONSchema: &JSONSchema{Name: name, Schema: rf.Schema}}
		} else {
			out.ResponseFormat = &ResponseFormat{Type: "json_object"}
			instruction = structured.Instruction(rf)
		}
	}

	out.Messages = make([]Message, 0, len(req.Messages)+1)
	if instruction != "" {
		out.Messages = append(out.Messages, Message{Role: "system", Content: instruction})
	}
	for i := range req.Messages {
		m := &req.Messages[i]
		wm := Message{Role: m.Role.String(), Content: m.Content}
		switch m.Role {
		case llm.RoleUser, llm.RoleSystem:
			if len(m.Images) > 0 {
				if !d.Images {
					return nil, llm.Errorf(d.Provider, llm.KindUnsupported, "this provider takes no images; route image requests to a vision-capable provider")
				}
				parts := make([]ContentPart, 0, len(m.Images)+1)
				if m.Content != "" {
					parts = append(parts, ContentPart{Type: "text", Text: m.Content})
				}
				for _, img := range m.Images {
					parts = append(parts, ContentPart{Type: "image_url", ImageURL: &ImageURL{URL: DataURI(img)}})
				}
				wm.Content = parts
			}
		case llm.RoleAssistant:
			for _, tc := range m.ToolCalls {
				args := tc.Arguments
				if args == "" {
					args = "{}"
				}
				wm.ToolCalls = append(wm.ToolCalls, ToolCall{ID: tc.ID, Type: "function", Function: FunctionCall{Name: tc.Name, Arguments: args}})
			}
			if m.Reasoning != "" && (replay == llm.ReplayAll || (replay == llm.ReplayToolCalls && len(m.ToolCalls) > 0)) {
				wm.ReasoningContent = m.Reasoning
			}
		case llm.RoleTool:
			wm.ToolCallID = m.ToolCallID
		}
		out.Messages = append(out.Messages, wm)
	}

	tools := req.Tools
	switch req.ToolChoice.Mode {
	case llm.ToolChoiceAuto:
		out.ToolChoice = "auto"
	case llm.ToolChoiceNone:
		out.ToolChoice = "none"
		if d.NoToolChoice {
			tools = nil
		}
	case llm.ToolChoiceRequired:
		out.ToolChoice = "required"
		if d.NoRequiredToolChoice {
			out.ToolChoice = "auto"
		}
	case llm.ToolChoiceNamed:
		nc := NamedToolChoice{Type: "function"}
		nc.Function.Name = req.ToolChoice.Name
		out.ToolChoice = nc
		if d.NoToolChoice {
			tools = onlyTool(tools, req.ToolChoice.Name)
		}
	}
	if d.NoToolChoice {
		out.ToolChoice = nil
	}
	if len(tools) == 0 {
		out.ToolChoice = nil
	}
	for _, t := range tools {
		params := t.Parameters
		if len(params) == 0 {
			params = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		out.Tools = append(out.Tools, Tool{Type: "function", Function: FunctionDef{Name: t.Name, Description: t.Description, Parameters: params}})
	}
	if d.Thinking != nil {
		d.Thinking(req.Thinking, out)
	}
	return out, nil
}

func onlyTool(tools []llm.Tool, name string) []llm.Tool {
	for _, t := range tools {
		if t.Name == name {
			return []llm.Tool{t}
		}
	}
	return tools
}

func mentionsJSON(msgs []llm.Message) bool {
	for _, m := range msgs {
		if strings.Contains(strings.ToLower(m.Content), "json") {
			return true
		}
	}
	return false
}

// DataURI encodes an image as a base64 data URI, sniffing the MIME type
// when it is missing.
func DataURI(img llm.Image) string {
	mime := img.MIMEType
	if mime == "" {
		mime = http.DetectContentType(img.Data)
	}
	var b strings.Builder
	b.Grow(len("data:;base64,") + len(mime) + base64.StdEncoding.EncodedLen(len(img.Data)))
	b.WriteString("data:")
	b.WriteString(mime)
	b.WriteString(";base64,")
	b.WriteString(base64.StdEncoding.EncodeToString(img.Data))
	return b.String()
}
