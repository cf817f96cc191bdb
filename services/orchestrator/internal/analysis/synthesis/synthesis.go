// Package synthesis makes the synthesis call of an analysis: one model call
// with a JSON-schema response format that may only format the tool results
// it is given. The answer is validated against the output schema after our
// code has merged in data_sources (tools that returned data) and data_gaps
// (tools that failed, were cancelled or returned nothing), and checked the
// source of every claim against what the tools returned ([CheckSources]) —
// none of this is left to the model.
package synthesis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/grpc"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// SystemPrompt confines the model to the tool results.
const SystemPrompt = `You are a synthesis agent. Format the provided tool results into the required JSON structure.

CRITICAL RULES:
- Use ONLY data from the tool results below. Add nothing from your own knowledge.
- If a value is not in the tool results, use null (where the schema allows it) and say so in the summary.
- Some tools failed or returned nothing; they are listed as missing data. Report that honestly; never fill the gap.
- Where the schema has a "source" field, write exactly one of: the tool name, the heading of the result (after ###), or a document_id that appears in that result. A claim whose source is anything else is marked unsupported.
- data_sources, data_gaps, supported and unsupported_reason are set by the service; you need not fill them.
- Answer with one JSON value that follows the output schema exactly.`

// Outcome is what one tool job ended with.
type Outcome struct {
	// Tool is the tool name.
	Tool string
	// Title is the call as the model wrote it.
	Title string
	// Status is "complete", "failed" or "cancelled".
	Status string
	// Data is the tool's JSON result, for complete jobs.
	Data json.RawMessage
	// Error is the failure, for failed jobs.
	Error string
}

// gotData reports whether the outcome is a data source.
func (o Outcome) gotData() bool { return o.Status == "complete" && !tools.IsEmpty(o.Data) }

// Coverage computes data_sources (names of tools that returned data, each
// once, in order) and data_gaps (one line per call that failed, was
// cancelled or returned nothing).
func Coverage(outcomes []Outcome) (sources, gaps []string) {
	sources, gaps = []string{}, []string{}
	for _, o := range outcomes {
		switch {
		case o.gotData():
			if !slices.Contains(sources, o.Tool) {
				sources = append(sources, o.Tool)
			}
		case o.Status == "failed":
			gaps = append(gaps, fmt.Sprintf("%s: failed: %s", o.Title, o.Error))
		case o.Status == "cancelled":
			gaps = append(gaps, o.Title+": cancelled")
		default:
			gaps = append(gaps, o.Title+": returned no data")
		}
	}
	return sources, gaps
}

// Model is the part of the ModelService client synthesis uses.
type Model interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// Synthesizer makes synthesis calls. It is safe for concurrent use.
type Synthesizer struct {
	model        Model
	logicalModel string
}

// New returns a synthesizer calling logicalModel (e.g. "chat") on model.
func New(model Model, logicalModel string) *Synthesizer {
	return &Synthesizer{model: model, logicalModel: logicalModel}
}

// ErrInvalidOutput marks an answer that is not JSON or does not satisfy the
// output schema.
var ErrInvalidOutput = errors.New("synthesis output invalid")

// Synthesize asks the model to answer query from outcomes in the shape of
// out, merges data_sources and data_gaps, marks each claim's source
// supported or not ([CheckSources]), and validates the result. It returns
// the answer, or the model error, or an error wrapping [ErrInvalidOutput]
// that says what did not validate.
func (s *Synthesizer) Synthesize(ctx context.Context, query string, out *schemas.Output, outcomes []Outcome) (map[string]any, error) {
	sources, gaps := Coverage(outcomes)
	resp, err := s.model.Chat(ctx, &modelv1.ChatRequest{
		Model: s.logicalModel,
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: SystemPrompt},
			{Role: modelv1.Role_ROLE_USER, Content: Prompt(query, outcomes, gaps)},
		},
		ResponseFormat: &modelv1.ResponseFormat{
			Type:       modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
			JsonSchema: out.ModelSchema(),
			SchemaName: out.Name(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("synthesis failed: model: %w", err)
	}
	content := strings.TrimSpace(resp.GetMessage().GetContent())
	if len(content) > MaxAnswerBytes {
		return nil, fmt.Errorf("synthesis failed: %w: the answer is %d bytes, more than the %d an analysis keeps", ErrInvalidOutput, len(content), MaxAnswerBytes)
	}
	dec := json.NewDecoder(strings.NewReader(content))
	dec.UseNumber()
	var answer map[string]any
	if err := dec.Decode(&answer); err != nil || answer == nil {
		return nil, fmt.Errorf("synthesis failed: %w: answer is not a JSON object: %q", ErrInvalidOutput, clip(content, 200))
	}
	out.Merge(answer, sources, gaps)
	CheckSources(answer, outcomes)
	if err := out.Validate(answer); err != nil {
		return nil, fmt.Errorf("synthesis failed: %w: %w", ErrInvalidOutput, err)
	}
	return answer, nil
}

// Bounds of a synthesis: what its prompt carries of the tool results (each
// job's result is at most 512 KiB, but a plan has up to 16), and the
// answer an analysis keeps (stored on the analysis and its synthesis job,
// and read back whole by GetJob).
const (
	MaxPromptDataBytes = 1 << 20
	MaxAnswerBytes     = 256 << 10
)

// Prompt renders the user message: the query, every successful tool result
// as JSON (together at most MaxPromptDataBytes: a result past what is left
// is cut, saying so), and the list of missing data.
func Prompt(query string, outcomes []Outcome, gaps []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Original query: %s\n\n## Tool results\n\n", query)
	n, left := 0, MaxPromptDataBytes
	for _, o := range outcomes {
		if !o.gotData() {
			continue
		}
		n++
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, o.Data, "", "  "); err != nil {
			pretty.Reset()
			pretty.Write(o.Data)
		}
		data := pretty.String()
		if len(data) > left {
			data = utf8x.Prefix(data, left) + fmt.Sprintf("\n… [cut: %d bytes in all; the tool results together may hold %d]", pretty.Len(), MaxPromptDataBytes)
		}
		left -= min(len(data), left)
		fmt.Fprintf(&b, "### %s\n```json\n%s\n```\n\n", o.Title, data)
	}
	if n == 0 {
		b.WriteString("(no tool returned data)\n\n")
	}
	if len(gaps) > 0 {
		b.WriteString("## Missing data (do not fill in)\n\n")
		for _, g := range gaps {
			fmt.Fprintf(&b, "- %s\n", g)
		}
	}
	return b.String()
}

// clip shortens s to n bytes for error messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return utf8x.Prefix(s, n) + "…"
}
