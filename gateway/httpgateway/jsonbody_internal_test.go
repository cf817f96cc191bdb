package httpgateway

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// TestBodyErrorsNameTheField: whatever protojson refuses, the error names
// the field (as the client wrote it) and, for a value of the wrong kind,
// what was expected and what came.
func TestBodyErrorsNameTheField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		msg  proto.Message
		body string
		want string
	}{
		{"scope a string", &orchestratorv1.CreateConversationRequest{}, `{"scope":"x"}`,
			`scope: want a JSON object (agentmesh.common.v1.Scope), got a string (request body, line 1, column 10)`},
		{"messages a string", &modelv1.ChatRequest{}, `{"model":"chat","messages":"x"}`,
			`messages: want a JSON array, got a string (request body, line 1, column 28)`},
		{"message element a number", &modelv1.ChatRequest{}, `{"messages":[{"role":"ROLE_USER"}, 5]}`,
			`messages[1]: want a JSON object (agentmesh.model.v1.Message), got a number (request body, line 1, column 36)`},
		{"nested wrong kind, snake case", &modelv1.ChatRequest{}, "{\n  \"options\": {\"top_p\": \"high\"}\n}",
			`options.top_p: invalid value for double field topP: "high" (request body, line 2, column 24)`},
		{"bool for a string", &orchestratorv1.SubmitAnalysisRequest{}, `{"query":true}`,
			`query: want a string, got a boolean (request body, line 1, column 10)`},
		{"unknown enum name", &modelv1.ChatRequest{}, `{"messages":[{"role":"ROLE_KING"}]}`,
			`messages[0].role: invalid value for enum field role: "ROLE_KING" (request body, line 1, column 22)`},
		{"map a list", &indexerv1.FindDocumentsByExtractRequest{}, `{"extractType":"financial","fieldEquals":["a"]}`,
			`fieldEquals: want a JSON object, got an array (request body, line 1, column 42)`},
		{"map value a number", &indexerv1.FindDocumentsByExtractRequest{}, `{"fieldEquals":{"ticker":5}}`,
			`fieldEquals.ticker: want a string, got a number (request body, line 1, column 26)`},
		{"unknown field", &orchestratorv1.CreateConversationRequest{}, `{"scope":{"tenantId":"a","projekt":"p"}}`,
			`scope.projekt: unknown field "projekt" (request body, line 1, column 26)`},
		{"bytes not base64", &modelv1.ChatRequest{}, `{"messages":[{"images":[{"data":"***"}]}]}`,
			`messages[0].images[0].data: invalid value for bytes field data: "***" (request body, line 1, column 33)`},
		{"timestamp not RFC 3339", &orchestratorv1.ListJobsRequest{}, `{"createTimeFrom":"yesterday"}`,
			`createTimeFrom: invalid google.protobuf.Timestamp value "yesterday" (request body, line 1, column 19)`},
		{"timestamp a number", &orchestratorv1.ListJobsRequest{}, `{"createTimeFrom":5}`,
			`createTimeFrom: want an RFC 3339 timestamp string, e.g. "2026-01-02T15:04:05Z", got a number (request body, line 1, column 19)`},
		{"syntax error inside a field", &classifierv1.StartRunRequest{}, `{"instruction": nope}`,
			`instruction: not valid JSON: invalid value nope (request body, line 1, column 17)`},
		{"not JSON at all", &classifierv1.StartRunRequest{}, `not json`,
			`request body: not valid JSON: invalid value not (request body, line 1, column 1)`},
		{"an array body", &classifierv1.StartRunRequest{}, `[1]`,
			`request body: want a JSON object (agentmesh.classifier.v1.StartRunRequest), got an array (request body, line 1, column 1)`},
		{"invalid UTF-8 in a value", &classifierv1.StartRunRequest{}, "{\"instruction\":\"caf\xe9\"}",
			`instruction: invalid UTF-8 in string (request body, line 1, column 16)`},
		{"trailing data", &classifierv1.StartRunRequest{}, `{"instruction":"x"} {}`,
			`request body: not valid JSON: unexpected token { (request body, line 1, column 21)`},
		{"a lone surrogate ending a string", &indexerv1.SearchRequest{}, `{"query":"\ud800"}`,
			`query: \ud800 is half of a UTF-16 surrogate pair without its other half; write the character itself, or both halves (request body, line 1, column 10)`},
		{"a lone surrogate inside a string", &orchestratorv1.CreateConversationRequest{}, "{\n \"scope\": {\"tenantId\": \"x\"},\n \"title\": \"abc \\udc00 \\ud83d\\ude00 end\"}",
			`title: \udc00 is half of a UTF-16 surrogate pair without its other half; write the character itself, or both halves (request body, line 3, column 11)`},
		{"duplicate field", &classifierv1.StartRunRequest{}, `{"instruction":"x","instruction":"y"}`,
			`instruction: duplicate field "instruction" (request body, line 1, column 20)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := protojson.Unmarshal([]byte(tc.body), tc.msg)
			if err == nil {
				t.Fatal("protojson accepted the body")
			}
			got := describeBodyError([]byte(tc.body), tc.msg.ProtoReflect().Descriptor(), err).Error()
			if got != tc.want {
				t.Errorf("got  %s\nwant %s\n(protojson: %v)", got, tc.want, err)
			}
		})
	}
}

// TestDeepBodiesAreRefusedByName: a free-form value (a Struct) nested past
// maxBodyDepth is a 400 naming where it is, before protojson (which does
// not count such levels) lets it through to a service that cannot decode
// it; brackets inside strings do not count, and maxBodyDepth levels pass.
func TestDeepBodiesAreRefusedByName(t *testing.T) {
	t.Parallel()
	body := func(levels int, inString string) string {
		// The request object and the conversation list, object and
		// metadata take 4 levels; "a" holds the rest.
		n := levels - 4
		return `{"conversations":[{"id":"c","messages":[{"role":"customer","text":"` + inString + `"}],"metadata":{"a":` +
			strings.Repeat("[", n) + strings.Repeat("]", n) + `}}]}`
	}
	decode := func(b string) error {
		return bodyDecoder{r: strings.NewReader(b)}.Decode(&classifierv1.ImportConversationsRequest{})
	}
	if err := decode(body(maxBodyDepth, strings.Repeat("[{", 2000))); err != nil {
		t.Fatalf("%d levels (and brackets in a string): %v", maxBodyDepth, err)
	}
	b := body(maxBodyDepth+1, "")
	err := decode(b)
	// The column of the last '[', the one past the bound.
	want := fmt.Sprintf("conversations[0].metadata.a…: nested deeper than %d levels (request body, line 1, column %d)", maxBodyDepth, strings.LastIndex(b, "[")+1)
	if err == nil || err.Error() != want {
		t.Fatalf("%d levels: %v\nwant %s", maxBodyDepth+1, err, want)
	}
}
