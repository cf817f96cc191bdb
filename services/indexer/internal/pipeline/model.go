package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// ChatClient is the part of the model gateway the pipeline uses;
// modelv1.ModelServiceClient implements it.
type ChatClient interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// Models makes the pipeline's model calls: content type when the rules
// are unsure, a log's semantic summary, routing. Every call is bounded by
// Timeout; a nil *Models, or one without a client, makes none (callers
// fall back to rules and record why). It is safe for concurrent use.
type Models struct {
	// Client is the model gateway.
	Client ChatClient
	// Model is the logical model name, e.g. "chat".
	Model string
	// Timeout bounds one call.
	Timeout time.Duration
	// MaxChars caps the text sent in one call.
	MaxChars int
}

// ErrNoModel means no model is configured for the pipeline.
var ErrNoModel = errors.New("pipeline: no model configured")

func (m *Models) enabled() bool { return m != nil && m.Client != nil && m.Model != "" }

// call sends one request and returns the answer and the tokens it cost.
func (m *Models) call(ctx context.Context, req *modelv1.ChatRequest) (*modelv1.ChatResponse, int64, error) {
	if !m.enabled() {
		return nil, 0, ErrNoModel
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req.Model = m.Model
	temp := 0.0
	req.Options = &modelv1.GenerationOptions{Temperature: &temp}
	resp, err := m.Client.Chat(ctx, req)
	if err != nil {
		return nil, 0, fmt.Errorf("model gateway: %w", err)
	}
	return resp, resp.GetUsage().GetTotalTokens(), nil
}

func (m *Models) clipText(s string) string {
	n := 0
	if m != nil {
		n = m.MaxChars
	}
	if n <= 0 {
		n = 12000
	}
	return clip(s, n)
}

// structured asks for a JSON object matching schema and decodes it into v.
func (m *Models) structured(ctx context.Context, name, schema, system, user string, v any) (int64, error) {
	resp, tokens, err := m.call(ctx, &modelv1.ChatRequest{
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: system},
			{Role: modelv1.Role_ROLE_USER, Content: user},
		},
		ResponseFormat: &modelv1.ResponseFormat{Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: schema, SchemaName: name},
	})
	if err != nil {
		return tokens, err
	}
	if err := json.Unmarshal([]byte(resp.GetMessage().GetContent()), v); err != nil {
		return tokens, fmt.Errorf("the answer is not the JSON object asked for: %w", err)
	}
	return tokens, nil
}

// ContentTypeSchema is the JSON schema of the content-type call.
const ContentTypeSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["contentType", "reason"],
  "properties": {
    "contentType": {"type": "string", "enum": ["EMAIL", "JIRA", "CONFLUENCE", "LOG", "GENERIC"]},
    "reason": {"type": "string", "maxLength": 1000, "description": "One sentence: what in the text shows the type."}
  }
}`

const contentTypeSystem = `You classify one document for an intake pipeline. Types: EMAIL (an e-mail message),
JIRA (an issue tracker ticket), CONFLUENCE (a wiki or documentation page), LOG (machine log output),
GENERIC (anything else). Answer with JSON matching the schema.`

// DetectContentType asks the model for the content type of text, given
// what vision saw. It returns the type, the model's reason and the tokens
// spent; an answer that is not one of the five types is an error.
func (m *Models) DetectContentType(ctx context.Context, title, text, visionSummary string) (indexerv1.IntakeContentType, string, int64, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "Detect content type:\n\nTitle: %s\n\n%s", title, m.clipText(text))
	if visionSummary != "" {
		fmt.Fprintf(&b, "\n\nVISUAL CONTEXT:\n%s", visionSummary)
	}
	var ans struct {
		ContentType string `json:"contentType"`
		Reason      string `json:"reason"`
	}
	tokens, err := m.structured(ctx, "content_type", ContentTypeSchema, contentTypeSystem, b.String(), &ans)
	if err != nil {
		return 0, "", tokens, err
	}
	t, ok := indexerv1.IntakeContentType_value["INTAKE_CONTENT_TYPE_"+strings.ToUpper(strings.TrimSpace(ans.ContentType))]
	if !ok || t == 0 {
		return 0, "", tokens, fmt.Errorf("the model answered the unknown content type %q", ans.ContentType)
	}
	return indexerv1.IntakeContentType(t), strings.TrimSpace(ans.Reason), tokens, nil
}

// LogSummarySchema is the JSON schema of the log summary call.
const LogSummarySchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["summary", "keyEvents", "criticalDetails"],
  "properties": {
    "summary": {"type": "string", "description": "What the log shows, in two or three sentences."},
    "keyEvents": {"type": "array", "items": {"type": "string"}, "description": "The events that matter, in time order, each with its time."},
    "criticalDetails": {"type": "array", "items": {"type": "string"}, "description": "Errors, error codes, failing components and likely causes, as written in the log."}
  }
}`

const logSummarySystem = `You summarise application logs for a search index. Use only what the log states;
keep timestamps, error codes and component names exactly as written. Answer with JSON matching the schema.`

// SummarizeLog asks the model for a log's semantic summary, key events
// and critical details, showing it digest (the log, or its digest when
// long). It fills ex's three fields only when the answer has all three.
func (m *Models) SummarizeLog(ctx context.Context, title, digest string, ex *indexerv1.LogExtraction) (int64, error) {
	var ans struct {
		Summary         string   `json:"summary"`
		KeyEvents       []string `json:"keyEvents"`
		CriticalDetails []string `json:"criticalDetails"`
	}
	tokens, err := m.structured(ctx, "log_summary", LogSummarySchema, logSummarySystem, "Log: "+title+"\n\n"+m.clipText(digest), &ans)
	if err != nil {
		return tokens, err
	}
	ans.KeyEvents = slices.DeleteFunc(ans.KeyEvents, func(s string) bool { return strings.TrimSpace(s) == "" })
	ans.CriticalDetails = slices.DeleteFunc(ans.CriticalDetails, func(s string) bool { return strings.TrimSpace(s) == "" })
	if strings.TrimSpace(ans.Summary) == "" || len(ans.KeyEvents) == 0 || len(ans.CriticalDetails) == 0 {
		return tokens, errors.New("the model's log summary lacks a summary, key events or critical details")
	}
	ex.Summary, ex.KeyEvents, ex.CriticalDetails = ans.Summary, ans.KeyEvents, ans.CriticalDetails
	ex.SummarizedBy = indexerv1.DecidedBy_DECIDED_BY_MODEL
	return tokens, nil
}

// maxReasonRunes bounds a reason the model gives (content type, route).
const maxReasonRunes = 1000

// RouteTool is the name of the routing tool offered to the model.
const RouteTool = "route_task"

const routeToolSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["decision", "reason"],
  "properties": {
    "decision": {"type": "string", "enum": ["DONE", "LIFT_UP"]},
    "reason": {"type": "string", "maxLength": 1000, "description": "One sentence saying why."}
  }
}`

const routeSystem = `You are the last step of a document intake pipeline. The document is indexed already.
Decide with the route_task tool:
- DONE: informational content; indexing was all it needed.
- LIFT_UP: it needs coding, complex analysis, a user's consultation or a decision: a stronger agent takes it over.`

// Route offers the model the route_task tool over a summary of the
// pipeline. It returns the decision and reason of the tool call; a
// model that calls no tool (or not route_task) yields ok false, and a
// call with arguments that do not fit the tool's schema an error.
func (m *Models) Route(ctx context.Context, summary string) (routing indexerv1.Routing, reason string, ok bool, tokens int64, err error) {
	resp, tokens, err := m.call(ctx, &modelv1.ChatRequest{
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: routeSystem},
			{Role: modelv1.Role_ROLE_USER, Content: m.clipText(summary)},
		},
		Tools:      []*modelv1.Tool{{Name: RouteTool, Description: "Route the task: DONE or LIFT_UP, with the reason.", ParametersJsonSchema: routeToolSchema}},
		ToolChoice: &modelv1.ToolChoice{Mode: modelv1.ToolChoiceMode_TOOL_CHOICE_MODE_AUTO},
	})
	if err != nil {
		return 0, "", false, tokens, err
	}
	for _, tc := range resp.GetMessage().GetToolCalls() {
		if tc.GetName() != RouteTool {
			continue
		}
		var args struct {
			Decision string `json:"decision"`
			Reason   string `json:"reason"`
		}
		if err := json.Unmarshal([]byte(tc.GetArgumentsJson()), &args); err != nil {
			return 0, "", false, tokens, fmt.Errorf("route_task arguments are not JSON: %w", err)
		}
		// A tool call's arguments are the model's: the schema's bound on
		// the reason is not enforced for them, so it is cut here (a
		// model steered by the document wrote 2 MiB of reason).
		reason := clip(strings.TrimSpace(args.Reason), maxReasonRunes)
		switch strings.ToUpper(strings.TrimSpace(args.Decision)) {
		case "DONE":
			return indexerv1.Routing_ROUTING_DONE, reason, true, tokens, nil
		case "LIFT_UP":
			return indexerv1.Routing_ROUTING_LIFT_UP, reason, true, tokens, nil
		}
		return 0, "", false, tokens, fmt.Errorf("route_task decision %q is neither DONE nor LIFT_UP", args.Decision)
	}
	return 0, "", false, tokens, nil
}
