package extract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// TypeProse is the extract type the LLM extractor produces.
const TypeProse = "prose"

// ProseConfidence is the confidence given to model-made extracts: the
// schema is enforced, the content is not verified.
const ProseConfidence = 0.8

// ChatClient is the part of the model gateway the LLM extractor uses;
// modelv1.ModelServiceClient implements it.
type ChatClient interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// ProseSchema is the JSON schema the model must answer with.
const ProseSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["summary", "category", "entities", "key_facts", "action_required"],
  "properties": {
    "summary": {"type": "string", "maxLength": 2000, "description": "Two or three sentences saying what the document is about."},
    "category": {"type": "string", "enum": ["financial", "meeting", "technical", "incident", "request", "general"]},
    "entities": {
      "type": "array",
      "maxItems": 100,
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["name", "kind"],
        "properties": {
          "name": {"type": "string", "maxLength": 200},
          "kind": {"type": "string", "enum": ["person", "organization", "ticker", "product", "service", "location", "other"]}
        }
      }
    },
    "key_facts": {"type": "array", "maxItems": 50, "items": {"type": "string", "maxLength": 1000}, "description": "Facts stated in the document, each one short sentence, with numbers and dates as written."},
    "action_required": {"type": "boolean", "description": "True when the document asks someone to do, decide or answer something."}
  }
}`

const proseSystemPrompt = `You extract structured data from one document for a search index.
Use only what the document states; never add facts. Answer with JSON matching the schema.`

// Prose is the LLM extractor for unstructured prose: one Chat call through
// the model gateway with ProseSchema as the response format, at ingestion
// only. It handles documents with enough running text that rules cannot
// structure (emails, tickets, wiki pages, reports).
type Prose struct {
	client   ChatClient
	model    string
	maxChars int
}

var _ Extractor = (*Prose)(nil)

// NewProse returns the extractor calling client with the logical model
// (e.g. "chat"), sending at most maxChars characters of each document.
func NewProse(client ChatClient, model string, maxChars int) (*Prose, error) {
	if client == nil || model == "" {
		return nil, errors.New("extract: the prose extractor needs a model gateway client and a model")
	}
	if maxChars <= 0 {
		maxChars = 12000
	}
	return &Prose{client: client, model: model, maxChars: maxChars}, nil
}

// Name returns "llm_prose".
func (*Prose) Name() string { return "llm_prose" }

// SchemaVersion returns 1.
func (*Prose) SchemaVersion() int { return 1 }

// CanHandle reports whether doc has at least 30 words of running text,
// and is not a log or API reference (which rules handle better).
func (*Prose) CanHandle(doc *Document) bool {
	if doc.ContentType == "log" || doc.ContentType == TypeAPIDoc {
		return false
	}
	words := 0
	for _, l := range strings.Split(doc.Text, "\n") {
		s := strings.TrimSpace(l)
		if s == "" || strings.HasPrefix(s, "|") || strings.HasPrefix(s, "<") {
			continue
		}
		words += len(strings.Fields(s))
	}
	return words >= 30
}

// Extract asks the model and returns one "prose" extract over the text
// sent. It fails if the call fails or the answer does not fit the schema.
func (p *Prose) Extract(ctx context.Context, doc *Document) ([]Extract, error) {
	text := doc.Text
	if utf8.RuneCountInString(text) > p.maxChars {
		text = string([]rune(text)[:p.maxChars])
	}
	var user strings.Builder
	fmt.Fprintf(&user, "Title: %s\nContent type: %s\n", doc.Title, doc.ContentType)
	if doc.VisionSummary != "" {
		fmt.Fprintf(&user, "Images: %s\n", doc.VisionSummary)
	}
	fmt.Fprintf(&user, "\n%s", text)
	temp := 0.0
	resp, err := p.client.Chat(ctx, &modelv1.ChatRequest{
		Model: p.model,
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: proseSystemPrompt},
			{Role: modelv1.Role_ROLE_USER, Content: user.String()},
		},
		ResponseFormat: &modelv1.ResponseFormat{
			Type:       modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
			JsonSchema: ProseSchema,
			SchemaName: "prose_extract",
		},
		Options: &modelv1.GenerationOptions{Temperature: &temp},
	})
	if err != nil {
		return nil, fmt.Errorf("llm_prose: model gateway: %w", err)
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(resp.GetMessage().GetContent()), &data); err != nil {
		return nil, fmt.Errorf("llm_prose: answer is not a JSON object: %w", err)
	}
	if err := checkProse(data); err != nil {
		return nil, fmt.Errorf("llm_prose: %w", err)
	}
	return []Extract{{Type: TypeProse, Data: data, Confidence: ProseConfidence, SpanStart: 0, SpanEnd: len(text)}}, nil
}

// checkProse re-checks the shape the gateway validated, since the indexer
// stores and indexes what it gets.
func checkProse(d map[string]any) error {
	if s, ok := d["summary"].(string); !ok || strings.TrimSpace(s) == "" {
		return errors.New("answer has no summary")
	}
	if _, ok := d["category"].(string); !ok {
		return errors.New("answer has no category")
	}
	ents, ok := d["entities"].([]any)
	if !ok {
		return errors.New("answer has no entities list")
	}
	for i, e := range ents {
		m, ok := e.(map[string]any)
		if !ok {
			return fmt.Errorf("entity %d is not an object", i)
		}
		if _, ok := m["name"].(string); !ok {
			return fmt.Errorf("entity %d has no name", i)
		}
	}
	if _, ok := d["key_facts"].([]any); !ok {
		return errors.New("answer has no key_facts list")
	}
	if _, ok := d["action_required"].(bool); !ok {
		return errors.New("answer has no action_required flag")
	}
	return nil
}
