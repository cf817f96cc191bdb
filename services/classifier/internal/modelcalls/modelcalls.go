// Package modelcalls makes the three kinds of model call a classification
// run needs, through the model gateway's ModelService: the plan and the
// batch classification as JSON-schema structured output on the classifier
// model, and the run summary as text on the chat model. It owns the prompts
// and schemas and checks the shape of every answer; the state machine
// checks that the answer fits the run.
package modelcalls

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/plan"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// Schema names, as the gateway sees them.
const (
	PlanSchemaName           = "classification_plan"
	ClassificationSchemaName = "batch_classification"
)

// Markers that begin the user message of each call, so a log line or a
// scripted simulator can tell the calls apart.
const (
	PlanMarker      = "Write the classification plan"
	ClassifyMarker  = "Classify these conversations"
	SummarizeMarker = "Summarize this classification run"
)

// Prompt size bounds.
const (
	maxMessagesShown = 40
	maxTextShown     = 1500
	maxLabelsShown   = 200
)

// Errors of the calls.
var (
	// ErrModel means the gateway failed the call.
	ErrModel = errors.New("model call failed")
	// ErrAnswer means the model answered, but not what the schema
	// promised (here, or at the gateway's validation).
	ErrAnswer = errors.New("model answer unusable")
)

// reasonSchemaValidation is the gateway's ErrorInfo reason for an answer
// that did not validate against the request's JSON schema
// (agentmesh.model.v1.ResponseFormat.json_schema).
const reasonSchemaValidation = "SCHEMA_VALIDATION_FAILED"

// Client makes the calls. It is safe for concurrent use.
type Client struct {
	svc             modelv1.ModelServiceClient
	classifierModel string
	chatModel       string
	timeout         time.Duration
}

// New returns a client using classifierModel for plans and classifications
// and chatModel for summaries (logical model names of the gateway). Each
// call is bounded by timeout (0: only by the caller's context).
func New(svc modelv1.ModelServiceClient, classifierModel, chatModel string, timeout time.Duration) *Client {
	return &Client{svc: svc, classifierModel: classifierModel, chatModel: chatModel, timeout: timeout}
}

// Bounds of what the model writes that a run keeps (in its checkpoint,
// rewritten at each step, and in its events): the model is steered by the
// conversations it reads. The plan's texts are bounded by planSchema, a
// label's reason and the summary here.
const (
	maxReasonChars  = 2000
	maxSummaryChars = 20000
)

// planSchema is the JSON schema of a plan answer.
const planSchema = `{
  "type": "object",
  "properties": {
    "targetSampleSize": {"type": "integer", "minimum": 1},
    "strategy": {"type": "string", "maxLength": 2000},
    "planDetails": {"type": "string", "maxLength": 8000},
    "additionalInstructions": {"type": "string", "maxLength": 4000},
    "query": {"type": "object"}
  },
  "required": ["targetSampleSize", "strategy", "planDetails", "additionalInstructions", "query"],
  "additionalProperties": false
}`

// classificationSchema is the JSON schema of the answer for a batch with
// the given conversation ids: one classification per conversation, each
// naming one of the batch's ids. A provider with constrained decoding
// (Ollama's format) then cannot invent or drop an id, and the gateway's
// validation shows any other model exactly what it got wrong in its one
// repair attempt.
func classificationSchema(ids []string) string {
	schema := map[string]any{
		"type": "object",
		"properties": map[string]any{
			"classifications": map[string]any{
				"type":     "array",
				"minItems": len(ids),
				"maxItems": len(ids),
				"items": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"id":     map[string]any{"type": "string", "enum": ids},
						"label":  map[string]any{"type": "string", "enum": []string{"RESOLVED", "UNRESOLVED"}},
						"reason": map[string]any{"type": "string", "maxLength": maxReasonChars},
					},
					"required":             []string{"id", "label", "reason"},
					"additionalProperties": false,
				},
			},
		},
		"required":             []string{"classifications"},
		"additionalProperties": false,
	}
	b, err := json.Marshal(schema)
	if err != nil {
		panic(err) // maps of strings and numbers always marshal
	}
	return string(b)
}

// PlanInput is what the planner knows.
type PlanInput struct {
	// Instruction is the user's request.
	Instruction string
	// Previous are the run's earlier plans.
	Previous []statemachine.Plan
	// Feedback is the human's feedback on the last rejected fetch or batch.
	Feedback string
	// ReplanReason says why the run replans on its own.
	ReplanReason string
	// Labelled counts the conversations labelled so far.
	Labelled int
	// MaxBatch is the most one fetch returns.
	MaxBatch int
}

// planAnswer is the plan JSON.
type planAnswer struct {
	TargetSampleSize       *int           `json:"targetSampleSize"`
	Strategy               string         `json:"strategy"`
	PlanDetails            string         `json:"planDetails"`
	AdditionalInstructions string         `json:"additionalInstructions"`
	Query                  map[string]any `json:"query"`
}

// Plan asks the classifier model for a plan. The query is returned as the
// model wrote it; the caller validates it (package plan).
func (c *Client) Plan(ctx context.Context, in PlanInput) (statemachine.Plan, error) {
	system := "You plan classification runs over a company's stored customer-service conversations. " +
		"A run labels each conversation RESOLVED (by the end, the customer's issue was fixed or the question fully answered) " +
		"or UNRESOLVED (anything else: pending escalations, promises without action, unhappy or missing answers).\n\n" +
		"Answer with a JSON plan: targetSampleSize (how many conversations to classify in total, at least 1), " +
		"strategy (one sentence), planDetails (markdown the human approver reads: what you will sample and why), " +
		"additionalInstructions (guidance for the classifier), and query (a MongoDB filter over the conversations collection; {} matches all).\n\n" +
		fmt.Sprintf("One fetch returns at most %d conversations; conversations already labelled in this run are excluded automatically, "+
			"and further pages are fetched until the target is reached.\n\n", in.MaxBatch) +
		plan.Describe()
	var u strings.Builder
	fmt.Fprintf(&u, "%s for this request.\n\nInstruction: %s\n", PlanMarker, in.Instruction)
	fmt.Fprintf(&u, "\nConversations labelled so far in this run: %d\n", in.Labelled)
	if len(in.Previous) > 0 {
		u.WriteString("\nPrevious plans of this run:\n")
		for i, p := range in.Previous {
			fmt.Fprintf(&u, "%d. strategy: %s; target: %d; query: %s", i+1, truncate(p.Strategy, 2000), p.TargetSampleSize, truncate(p.QueryJSON, plan.MaxQueryBytes))
			if p.Refused != "" {
				fmt.Fprintf(&u, "; REFUSED: %s", p.Refused)
			}
			u.WriteString("\n")
		}
	}
	if in.Feedback != "" {
		fmt.Fprintf(&u, "\nHuman feedback on the previous plan (follow it): %s\n", in.Feedback)
	}
	if in.ReplanReason != "" {
		fmt.Fprintf(&u, "\nA new plan is needed because %s\n", in.ReplanReason)
	}
	content, err := c.chat(ctx, c.classifierModel, system, u.String(), PlanSchemaName, planSchema)
	if err != nil {
		return statemachine.Plan{}, err
	}
	var a planAnswer
	if err := json.Unmarshal([]byte(content), &a); err != nil {
		return statemachine.Plan{}, fmt.Errorf("%w: plan is not the promised JSON: %v", ErrAnswer, err)
	}
	if a.TargetSampleSize == nil {
		return statemachine.Plan{}, fmt.Errorf("%w: plan has no targetSampleSize", ErrAnswer)
	}
	if a.Query == nil {
		a.Query = map[string]any{}
	}
	q, err := json.Marshal(a.Query)
	if err != nil {
		return statemachine.Plan{}, fmt.Errorf("%w: plan query: %v", ErrAnswer, err)
	}
	return statemachine.Plan{
		TargetSampleSize: *a.TargetSampleSize, Strategy: a.Strategy, DetailsMarkdown: a.PlanDetails,
		AdditionalInstructions: a.AdditionalInstructions, QueryJSON: string(q),
	}, nil
}

type classificationAnswer struct {
	Classifications []struct {
		ID     string `json:"id"`
		Label  string `json:"label"`
		Reason string `json:"reason"`
	} `json:"classifications"`
}

// Classify asks the classifier model to label a batch in one call.
func (c *Client) Classify(ctx context.Context, p *statemachine.Plan, instruction string, convs []conversations.Conversation) ([]statemachine.Classification, error) {
	system := "You classify customer-service conversations as RESOLVED or UNRESOLVED.\n" +
		"RESOLVED: by the end of the conversation the customer's issue was fixed, or their question fully answered, and nothing is left pending.\n" +
		"UNRESOLVED: the issue is still open — escalated, waiting on someone, promised later, refused, or the customer left unhappy.\n" +
		"Classify every conversation you are given exactly once, using its exact id, with a one-sentence reason."
	if p != nil && p.AdditionalInstructions != "" {
		system += "\n\nAdditional instructions: " + p.AdditionalInstructions
	}
	var u strings.Builder
	fmt.Fprintf(&u, "%s (%d) for this request: %s\n", ClassifyMarker, len(convs), instruction)
	for _, cv := range convs {
		fmt.Fprintf(&u, "\n### Conversation %s (%s, %d messages)\n", cv.ID, orDash(cv.Channel), len(cv.Messages))
		for i, m := range cv.Messages {
			if i == maxMessagesShown {
				fmt.Fprintf(&u, "[%d more messages]\n", len(cv.Messages)-i)
				break
			}
			fmt.Fprintf(&u, "%s: %s\n", m.Role, truncate(m.Text, maxTextShown))
		}
	}
	ids := make([]string, len(convs))
	for i, cv := range convs {
		ids[i] = cv.ID
	}
	content, err := c.chat(ctx, c.classifierModel, system, u.String(), ClassificationSchemaName, classificationSchema(ids))
	if err != nil {
		return nil, err
	}
	var a classificationAnswer
	if err := json.Unmarshal([]byte(content), &a); err != nil {
		return nil, fmt.Errorf("%w: classification is not the promised JSON: %v", ErrAnswer, err)
	}
	out := make([]statemachine.Classification, len(a.Classifications))
	for i, x := range a.Classifications {
		out[i] = statemachine.Classification{
			ConversationID: strings.TrimSpace(x.ID), Label: statemachine.Label(strings.ToUpper(strings.TrimSpace(x.Label))),
			Reason: strings.TrimSpace(x.Reason),
		}
	}
	return out, nil
}

// SummaryLabel is one saved label, for the summary prompt.
type SummaryLabel struct {
	// ConversationID is the conversation.
	ConversationID string
	// Label is the outcome.
	Label string
	// Reason is the justification.
	Reason string
}

// Summarize asks the chat model for the run's markdown summary.
func (c *Client) Summarize(ctx context.Context, r statemachine.Run, saved []SummaryLabel) (string, error) {
	system := "You write short, factual markdown summaries of conversation classification runs for support managers: " +
		"the outcome in numbers, the main reasons conversations stayed unresolved, and one or two recommendations."
	var u strings.Builder
	fmt.Fprintf(&u, "%s.\n\nInstruction: %s\n", SummarizeMarker, r.Instruction)
	if p := r.CurrentPlan(); p != nil {
		fmt.Fprintf(&u, "Plan: %s (target %d)\n", p.Strategy, p.TargetSampleSize)
	}
	fmt.Fprintf(&u, "Classified: %d (%d RESOLVED, %d UNRESOLVED)\n\nLabels:\n", len(r.LabelledIDs), r.Resolved, r.Unresolved)
	for i, l := range saved {
		if i == maxLabelsShown {
			fmt.Fprintf(&u, "[%d more]\n", len(saved)-i)
			break
		}
		fmt.Fprintf(&u, "- %s: %s — %s\n", l.ConversationID, l.Label, truncate(l.Reason, 300))
	}
	content, err := c.chat(ctx, c.chatModel, system, u.String(), "", "")
	if err != nil {
		return "", err
	}
	content = strings.TrimSpace(content)
	if content == "" {
		return "", fmt.Errorf("%w: empty summary", ErrAnswer)
	}
	// The summary is kept in the run's checkpoint and streamed: a model
	// steered by the conversations it read wrote 9 MiB of it.
	return truncate(content, maxSummaryChars), nil
}

// chat runs one Chat call; with a schema it asks for JSON-schema output.
func (c *Client) chat(ctx context.Context, model, system, user, schemaName, schema string) (string, error) {
	req := &modelv1.ChatRequest{
		Model: model,
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: system},
			{Role: modelv1.Role_ROLE_USER, Content: user},
		},
	}
	if schema != "" {
		req.ResponseFormat = &modelv1.ResponseFormat{
			Type: modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA, JsonSchema: schema, SchemaName: schemaName,
		}
	}
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	// A call cut by a dying model gateway replica is sent again by the
	// connection (grpcx.Dial); what fails here has failed for good.
	resp, err := c.svc.Chat(ctx, req)
	if err != nil {
		if grpcx.Reason(err) == reasonSchemaValidation {
			// The model answered (its tokens are spent), unusably.
			return "", fmt.Errorf("%w: %s: %w", ErrAnswer, model, err)
		}
		return "", fmt.Errorf("%w: %s: %w", ErrModel, model, err)
	}
	return resp.GetMessage().GetContent(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return utf8x.Prefix(s, n) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
