package openaiapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// chatRequest is a decoded POST /chat/completions body.
type chatRequest struct {
	req          *modelv1.ChatRequest
	stream       bool
	includeUsage bool
}

// droppedChatFields are the fields of a chat completion request that the
// README's conformance table lists as ignored, with the type OpenAI's API
// gives each: their values are dropped, their types checked.
var droppedChatFields = []typed{
	{"user", aString}, // callers are identified by API key
	{"parallel_tool_calls", aBoolean},
	{"top_logprobs", anInteger},
	{"frequency_penalty", aNumber},
	{"presence_penalty", aNumber},
	{"logit_bias", anObject},
	{"store", aBoolean},
	{"metadata", anObject},
	{"service_tier", aString},
	{"modalities", anArray},
	{"audio", anObject},
	{"prediction", anObject},
	{"web_search_options", anObject},
	{"verbosity", aString},
}

// decodeChat turns an OpenAI chat completion request into a ChatRequest.
// What ModelService's contract checks (ranges, counts, tool names) is left
// to it, and its errors are renamed to these parameters (openAIParam); here
// are the checks only this format needs: types, the shapes OpenAI allows,
// and what the mesh cannot do (n > 1, logprobs, remote image URLs, audio
// and file parts), refused rather than silently dropped.
func decodeChat(body []byte) (*chatRequest, error) {
	o, err := parseObject(body, "")
	if err != nil {
		return nil, err
	}
	out := &chatRequest{req: &modelv1.ChatRequest{}}
	r := out.req
	model, ok, err := o.str("model")
	if err != nil {
		return nil, err
	}
	if !ok || model == "" {
		return nil, badParam("model", "is required")
	}
	r.Model = model

	msgs, ok, err := o.array("messages")
	if err != nil {
		return nil, err
	}
	if !ok || len(msgs) == 0 {
		return nil, badParam("messages", "is required and must hold at least one message")
	}
	var calls toolCallBlock
	for i, raw := range msgs {
		param := o.index("messages", i)
		m, err := decodeMessage(raw, param)
		if err != nil {
			return nil, err
		}
		if err := calls.next(m, param); err != nil {
			return nil, err
		}
		r.Messages = append(r.Messages, m)
	}
	if err := calls.end(); err != nil {
		return nil, err
	}

	if err := decodeTools(o, r); err != nil {
		return nil, err
	}
	if r.ResponseFormat, err = decodeResponseFormat(o); err != nil {
		return nil, err
	}
	if r.Options, err = decodeOptions(o); err != nil {
		return nil, err
	}
	if r.Thinking, err = decodeReasoningEffort(o); err != nil {
		return nil, err
	}
	if n, err := o.integer("n"); err != nil {
		return nil, err
	} else if n != nil && *n != 1 {
		return nil, badParam("n", "only 1 choice per request is supported")
	}
	for _, legacy := range []string{"functions", "function_call"} {
		if o.has(legacy) {
			// Dropping them would leave a caller's functions unseen.
			return nil, badParam(legacy, "the deprecated %s parameter is not supported: use tools and tool_choice", legacy)
		}
	}
	if lp, _, err := o.boolean("logprobs"); err != nil {
		return nil, err
	} else if lp {
		return nil, badParam("logprobs", "log probabilities are not supported")
	}
	if err := o.check(droppedChatFields...); err != nil {
		return nil, err
	}
	if out.stream, _, err = o.boolean("stream"); err != nil {
		return nil, err
	}
	so, ok, err := o.object("stream_options")
	if err != nil {
		return nil, err
	}
	if ok {
		if out.includeUsage, _, err = so.boolean("include_usage"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// decodeMessage reads one message at param.
func decodeMessage(raw json.RawMessage, param string) (*modelv1.Message, error) {
	o, err := parseObject(raw, param)
	if err != nil {
		return nil, err
	}
	role, ok, err := o.str("role")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badParam(o.path("role"), "is required")
	}
	m := &modelv1.Message{}
	switch role {
	case "system", "developer":
		// developer is what OpenAI's reasoning models call the system role.
		m.Role = modelv1.Role_ROLE_SYSTEM
	case "user":
		m.Role = modelv1.Role_ROLE_USER
	case "assistant":
		m.Role = modelv1.Role_ROLE_ASSISTANT
	case "tool":
		m.Role = modelv1.Role_ROLE_TOOL
	default:
		return nil, badParam(o.path("role"), "must be one of system, developer, user, assistant, tool, got %q", role)
	}
	if err := decodeContent(o, m); err != nil {
		return nil, err
	}
	// A participant's name is ignored (no provider of the mesh takes it),
	// but checked as OpenAI checks it.
	if err := o.check(typed{"name", aString}); err != nil {
		return nil, err
	}
	// The fields of other roles' messages are dropped, and checked too.
	reasoning, toolCalls, toolCallID := typed{"reasoning_content", aString}, typed{"tool_calls", anArray}, typed{"tool_call_id", aString}
	switch m.Role {
	case modelv1.Role_ROLE_SYSTEM, modelv1.Role_ROLE_USER:
		if err := o.check(reasoning, toolCalls, toolCallID); err != nil {
			return nil, err
		}
	case modelv1.Role_ROLE_ASSISTANT:
		if err := o.check(toolCallID); err != nil {
			return nil, err
		}
		// DeepSeek's thinking models need a turn's chain of thought sent
		// back after its tool calls; clients of its OpenAI-style API do so
		// in reasoning_content.
		if m.Reasoning, _, err = o.str("reasoning_content"); err != nil {
			return nil, err
		}
		calls, _, err := o.array("tool_calls")
		if err != nil {
			return nil, err
		}
		for j, c := range calls {
			tc, err := decodeToolCall(c, o.index("tool_calls", j))
			if err != nil {
				return nil, err
			}
			m.ToolCalls = append(m.ToolCalls, tc)
		}
	case modelv1.Role_ROLE_TOOL:
		if err := o.check(reasoning, toolCalls); err != nil {
			return nil, err
		}
		id, ok, err := o.str("tool_call_id")
		if err != nil {
			return nil, err
		}
		if !ok || id == "" {
			return nil, badParam(o.path("tool_call_id"), "is required for a tool message")
		}
		m.ToolCallId = id
	}
	return m, nil
}

// decodeContent reads content: a string, or an array of parts. User
// messages may carry text and image_url parts; the others text only.
func decodeContent(o object, m *modelv1.Message) error {
	raw, ok := o.raw("content")
	if !ok {
		if m.Role == modelv1.Role_ROLE_ASSISTANT {
			return nil // an assistant turn that only called tools
		}
		return badParam(o.path("content"), "is required")
	}
	switch jsonKind(raw) {
	case "string":
		s, _, err := o.str("content")
		m.Content = s
		return err
	case "array":
	default:
		return badParam(o.path("content"), "want a string or an array of content parts, got %s", jsonKind(raw))
	}
	parts, _, err := o.array("content")
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return badParam(o.path("content"), "empty array: want at least one content part")
	}
	var text []string
	for j, raw := range parts {
		p, err := parseObject(raw, o.index("content", j))
		if err != nil {
			return err
		}
		typ, _, err := p.str("type")
		if err != nil {
			return err
		}
		switch typ {
		case "text":
			t, ok, err := p.str("text")
			if err != nil {
				return err
			}
			if !ok {
				return badParam(p.path("text"), "is required for a text part")
			}
			text = append(text, t)
		case "image_url":
			if m.Role != modelv1.Role_ROLE_USER {
				return badParam(p.path("type"), "image parts are allowed in user messages only")
			}
			img, err := decodeImage(p)
			if err != nil {
				return err
			}
			m.Images = append(m.Images, img)
		case "refusal":
			// An assistant turn's refusal, sent back as history: its text.
			if m.Role != modelv1.Role_ROLE_ASSISTANT {
				return badParam(p.path("type"), "refusal parts are allowed in assistant messages only")
			}
			t, _, err := p.str("refusal")
			if err != nil {
				return err
			}
			text = append(text, t)
		case "":
			return badParam(p.path("type"), "is required")
		default:
			return badParam(p.path("type"), "content parts of type %q are not supported (text and image_url are)", typ)
		}
	}
	// Parts join as the providers' OpenAI-style APIs join them for models
	// that take one text per message.
	m.Content = strings.Join(text, "\n")
	return nil
}

// dataURLImages are the image types an image_url part may hold, as the
// providers' vision models take them (and the upload route does).
var dataURLImages = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// decodeImage reads an image_url part. Only data URLs are taken: the
// gateway does not fetch URLs on a caller's behalf (that would let any
// key make it reach any address it can).
func decodeImage(p object) (*modelv1.ImagePart, error) {
	iu, ok, err := p.object("image_url")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badParam(p.path("image_url"), "is required for an image_url part")
	}
	url, ok, err := iu.str("url")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badParam(iu.path("url"), "is required")
	}
	if _, _, err := iu.str("detail"); err != nil {
		return nil, err
	}
	rest, isData := strings.CutPrefix(url, "data:")
	meta, data, hasComma := strings.Cut(rest, ",")
	mime, isBase64 := strings.CutSuffix(meta, ";base64")
	if !isData || !hasComma || !isBase64 {
		return nil, badParam(iu.path("url"), "must be a base64 data URL (data:image/png;base64,...): the gateway does not fetch remote images")
	}
	if !strings.HasPrefix(mime, "image/") {
		return nil, badParam(iu.path("url"), "data URL media type %q is not an image/ type", mime)
	}
	b, err := base64.StdEncoding.DecodeString(data)
	if err != nil {
		return nil, badParam(iu.path("url"), "data URL is not valid base64: %v", err)
	}
	if len(b) == 0 {
		return nil, badParam(iu.path("url"), "data URL holds no image")
	}
	// The bytes decide, as the upload route's and the vision service's
	// checks do: a provider given text labelled image/png fails the call,
	// and one given a JPEG labelled PNG may.
	sniffed := http.DetectContentType(b)
	if !slices.Contains(dataURLImages, sniffed) {
		return nil, badParam(iu.path("url"), "data URL holds no PNG, JPEG, GIF or WebP image: declared %s, but the bytes look like %s", mime, sniffed)
	}
	return &modelv1.ImagePart{Data: b, MimeType: sniffed}, nil
}

// decodeToolCall reads an assistant turn's tool call, sent back as history.
func decodeToolCall(raw json.RawMessage, param string) (*modelv1.ToolCall, error) {
	o, err := parseObject(raw, param)
	if err != nil {
		return nil, err
	}
	if typ, ok, err := o.str("type"); err != nil {
		return nil, err
	} else if ok && typ != "function" {
		return nil, badParam(o.path("type"), "only function tool calls are supported, got %q", typ)
	}
	id, _, err := o.str("id")
	if err != nil {
		return nil, err
	}
	fn, ok, err := o.object("function")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badParam(o.path("function"), "is required")
	}
	name, ok, err := fn.str("name")
	if err != nil {
		return nil, err
	}
	if !ok || name == "" {
		return nil, badParam(fn.path("name"), "is required")
	}
	args, _, err := fn.str("arguments")
	if err != nil {
		return nil, err
	}
	return &modelv1.ToolCall{Id: id, Name: name, ArgumentsJson: args}, nil
}

// decodeTools reads tools and tool_choice.
func decodeTools(o object, r *modelv1.ChatRequest) error {
	tools, _, err := o.array("tools")
	if err != nil {
		return err
	}
	for i, raw := range tools {
		t, err := parseObject(raw, o.index("tools", i))
		if err != nil {
			return err
		}
		if typ, _, err := t.str("type"); err != nil {
			return err
		} else if typ != "function" {
			return badParam(t.path("type"), "only function tools are supported, got %q", typ)
		}
		fn, ok, err := t.object("function")
		if err != nil {
			return err
		}
		if !ok {
			return badParam(t.path("function"), "is required")
		}
		name, ok, err := fn.str("name")
		if err != nil {
			return err
		}
		if !ok {
			return badParam(fn.path("name"), "is required")
		}
		desc, _, err := fn.str("description")
		if err != nil {
			return err
		}
		if _, _, err := fn.boolean("strict"); err != nil {
			return err
		}
		tool := &modelv1.Tool{Name: name, Description: desc}
		if params, ok := fn.raw("parameters"); ok {
			if jsonKind(params) != "object" {
				return badParam(fn.path("parameters"), "want a JSON schema object, got %s", jsonKind(params))
			}
			// The check ModelService gives response_format's schema: one
			// that does not compile (an unknown type, a remote $ref) would
			// otherwise reach the provider, or fail there.
			if err := toolSchemas.check(name, params); err != nil {
				return badParam(fn.path("parameters"), "%v", err)
			}
			tool.ParametersJsonSchema = string(params)
		}
		r.Tools = append(r.Tools, tool)
	}

	raw, ok := o.raw("tool_choice")
	if !ok {
		return nil
	}
	tc := &modelv1.ToolChoice{}
	switch jsonKind(raw) {
	case "string":
		s, _, _ := o.str("tool_choice")
		switch s {
		case "auto":
			tc.Mode = modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO
		case "none":
			tc.Mode = modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NONE
		case "required":
			tc.Mode = modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_REQUIRED
		default:
			return badParam("tool_choice", "must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}, got %q", s)
		}
	case "object":
		c, _, err := o.object("tool_choice")
		if err != nil {
			return err
		}
		if typ, _, err := c.str("type"); err != nil {
			return err
		} else if typ != "function" {
			return badParam(c.path("type"), "only function tool choices are supported, got %q", typ)
		}
		fn, ok, err := c.object("function")
		if err != nil {
			return err
		}
		if !ok {
			return badParam(c.path("function"), "is required")
		}
		name, ok, err := fn.str("name")
		if err != nil {
			return err
		}
		if !ok || name == "" {
			return badParam(fn.path("name"), "is required")
		}
		tc.Mode, tc.Name = modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_NAMED, name
	default:
		return badParam("tool_choice", "want a string or an object, got %s", jsonKind(raw))
	}
	r.ToolChoice = tc
	return nil
}

// decodeResponseFormat reads response_format. The model gateway validates
// a json_schema answer against the schema for every provider, whether or
// not the provider enforces it natively ("strict" asks for no more).
func decodeResponseFormat(o object) (*modelv1.ResponseFormat, error) {
	rf, ok, err := o.object("response_format")
	if err != nil || !ok {
		return nil, err
	}
	typ, _, err := rf.str("type")
	if err != nil {
		return nil, err
	}
	switch typ {
	case "text":
		return &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_TEXT}, nil
	case "json_object":
		return &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_OBJECT}, nil
	case "json_schema":
	default:
		return nil, badParam(rf.path("type"), "must be text, json_object or json_schema, got %q", typ)
	}
	js, ok, err := rf.object("json_schema")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, badParam(rf.path("json_schema"), "is required for type json_schema")
	}
	name, ok, err := js.str("name")
	if err != nil {
		return nil, err
	}
	if !ok || name == "" {
		return nil, badParam(js.path("name"), "is required")
	}
	if _, _, err := js.str("description"); err != nil {
		return nil, err
	}
	if _, _, err := js.boolean("strict"); err != nil {
		return nil, err
	}
	schema, ok := js.raw("schema")
	if !ok {
		return nil, badParam(js.path("schema"), "is required")
	}
	if jsonKind(schema) != "object" {
		return nil, badParam(js.path("schema"), "want a JSON schema object, got %s", jsonKind(schema))
	}
	return &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
		JsonSchema: string(schema), SchemaName: name}, nil
}

// decodeOptions reads the sampling parameters. Their ranges are
// ModelService's to check.
func decodeOptions(o object) (*modelv1.GenerationOptions, error) {
	opts := &modelv1.GenerationOptions{}
	var err error
	if opts.Temperature, err = o.number("temperature"); err != nil {
		return nil, err
	}
	if opts.TopP, err = o.number("top_p"); err != nil {
		return nil, err
	}
	// max_completion_tokens replaced max_tokens in OpenAI's API; a client
	// may send either, and the newer one wins when both are set.
	for _, name := range []string{"max_tokens", "max_completion_tokens"} {
		n, err := o.integer(name)
		if err != nil {
			return nil, err
		}
		if n != nil {
			if *n < 1 || *n > 1<<20 {
				return nil, badParam(name, "must be between 1 and 1048576, got %d", *n)
			}
			v := int32(*n)
			opts.MaxTokens = &v
		}
	}
	if opts.Seed, err = o.integer("seed"); err != nil {
		return nil, err
	}
	if opts.Stop, _, err = o.strings("stop", ""); err != nil {
		return nil, err
	}
	if opts.Temperature == nil && opts.TopP == nil && opts.MaxTokens == nil && opts.Seed == nil && len(opts.Stop) == 0 {
		return nil, nil
	}
	return opts, nil
}

// decodeReasoningEffort reads reasoning_effort: none turns thinking off,
// the others turn it on at that effort (minimal as low: the mesh's
// providers know three levels).
func decodeReasoningEffort(o object) (*modelv1.ThinkingOptions, error) {
	effort, ok, err := o.str("reasoning_effort")
	if err != nil || !ok {
		return nil, err
	}
	on, off := true, false
	switch effort {
	case "none":
		return &modelv1.ThinkingOptions{Enabled: &off}, nil
	case "minimal":
		return &modelv1.ThinkingOptions{Enabled: &on, Effort: "low"}, nil
	case "low", "medium", "high":
		return &modelv1.ThinkingOptions{Enabled: &on, Effort: effort}, nil
	}
	return nil, badParam("reasoning_effort", "must be none, minimal, low, medium or high, got %q", effort)
}

// toolCallBlock checks what OpenAI (and DeepSeek and Qwen after it)
// requires of tool messages: the tool calls of an assistant message are
// answered right after it, each by a tool message naming its id, before
// any other message. A request that breaks it would reach the provider as
// results of nothing, or calls never answered, which those providers
// refuse with a message naming no field (and others misread).
type toolCallBlock struct {
	at    string              // the assistant message whose calls are open (messages[i])
	calls []*modelv1.ToolCall // its calls
	open  map[string]bool     // the ids of those not answered yet
}

// next checks message m, whose parameter path is param, against the open
// block.
func (b *toolCallBlock) next(m *modelv1.Message, param string) error {
	if m.GetRole() == modelv1.Role_ROLE_TOOL {
		id := m.GetToolCallId()
		if !slices.ContainsFunc(b.calls, func(c *modelv1.ToolCall) bool { return c.GetId() == id }) {
			return badParam(param+".tool_call_id", "%q is not the id of a tool call of the assistant message before it: tool messages answer the tool calls of the assistant message they follow", m.GetToolCallId())
		}
		delete(b.open, id)
		return nil
	}
	if err := b.end(); err != nil {
		return err
	}
	if calls := m.GetToolCalls(); len(calls) > 0 {
		b.at, b.calls, b.open = param, calls, make(map[string]bool, len(calls))
		for k, c := range calls {
			if id := c.GetId(); id != "" && b.open[id] {
				// One tool message would answer both.
				return badParam(fmt.Sprintf("%s.tool_calls[%d].id", param, k), "%q is the id of another tool call of this message: each call needs an id of its own", id)
			}
			b.open[c.GetId()] = true
		}
	}
	return nil
}

// end closes the open block: each of its calls must have been answered.
func (b *toolCallBlock) end() error {
	for k, c := range b.calls {
		if c.GetId() == "" {
			return badParam(fmt.Sprintf("%s.tool_calls[%d].id", b.at, k), "is required: the tool message answering the call names it")
		}
		if b.open[c.GetId()] {
			return badParam(fmt.Sprintf("%s.tool_calls[%d].id", b.at, k),
				"tool call %q has no tool message answering it: each tool call of an assistant message is answered by a tool message right after that message", c.GetId())
		}
	}
	b.calls, b.open = nil, nil
	return nil
}
