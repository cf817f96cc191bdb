package conversations

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/plan"
)

func turn(role, text string) *classifierv1.ConversationTurn {
	return &classifierv1.ConversationTurn{Role: role, Text: text}
}

func withMetadata(js string) *classifierv1.CustomerConversation {
	md := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(js), md); err != nil {
		panic(err)
	}
	return &classifierv1.CustomerConversation{Id: "c", Messages: []*classifierv1.ConversationTurn{turn("agent", "x")}, Metadata: md}
}

func TestFromProtoValidates(t *testing.T) {
	t.Parallel()
	md, _ := structpb.NewStruct(map[string]any{"a": map[string]any{"$bad": 1}})
	tests := []struct {
		name  string
		conv  *classifierv1.CustomerConversation
		field string
	}{
		{"no id", &classifierv1.CustomerConversation{Messages: []*classifierv1.ConversationTurn{turn("customer", "hi")}}, "id"},
		{"id with spaces", &classifierv1.CustomerConversation{Id: "a b", Messages: []*classifierv1.ConversationTurn{turn("customer", "hi")}}, "id"},
		{"no messages", &classifierv1.CustomerConversation{Id: "c"}, "messages"},
		{"bad role", &classifierv1.CustomerConversation{Id: "c", Messages: []*classifierv1.ConversationTurn{turn("customer", "hi"), turn("bot", "x")}}, "messages[1].role"},
		{"empty text", &classifierv1.CustomerConversation{Id: "c", Messages: []*classifierv1.ConversationTurn{turn("agent", "  ")}}, "messages[0].text"},
		{"bad time", &classifierv1.CustomerConversation{Id: "c", Messages: []*classifierv1.ConversationTurn{{Role: "agent", Text: "x", Time: &timestamppb.Timestamp{Nanos: -1}}}}, "messages[0].time"},
		{"metadata operator key", &classifierv1.CustomerConversation{Id: "c", Messages: []*classifierv1.ConversationTurn{turn("agent", "x")}, Metadata: md}, "metadata.a"},
		// Objects in lists are stored too: their keys are checked alike,
		// and FerretDB refuses a list in a list.
		{"operator key in a list", withMetadata(`{"tags":["a",{"$where":"1"}]}`), "metadata.tags[1]"},
		{"dotted key in a list", withMetadata(`{"tags":[{"ok":{"a.b":1}}]}`), "metadata.tags[0].ok"},
		{"list in a list", withMetadata(`{"tags":[{"k":[1,[2]]}]}`), "metadata.tags[0].k[1]"},
		{"too deep through lists", withMetadata(`{"a":[{"b":[{"c":[{"d":[{"e":1}]}]}]}]}`), "metadata.a[0].b[0].c[0].d[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := FromProto(tc.conv)
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("error %v, want a FieldError on %s", err, tc.field)
			}
		})
	}
	c, err := FromProto(&classifierv1.CustomerConversation{Id: " c1 ", Messages: []*classifierv1.ConversationTurn{turn("Customer", " hi ")}})
	if err != nil || c.ID != "c1" || c.Messages[0].Role != "customer" || c.Messages[0].Text != "hi" {
		t.Errorf("normalised conversation %+v (%v)", c, err)
	}
}

func TestParseJSONLReportsLines(t *testing.T) {
	t.Parallel()
	in := strings.Join([]string{
		`{"id":"a","messages":[{"role":"customer","text":"x"}]}`,
		``,
		`{"id":"b","messages":[{"role":"customer","text":"x","time":"2024-01-01T00:00:00Z"}],"metadata":{"k":"v"}}`,
		`{"id":"a","messages":[{"role":"customer","text":"again"}]}`,
		`{`,
	}, "\n")
	seen := map[string]int{}
	ok, rej, err := ParseJSONL(strings.NewReader(in), seen)
	if err != nil {
		t.Fatal(err)
	}
	if len(ok) != 2 || ok[0].Line != 1 || ok[1].Line != 3 || ok[1].Conversation.Metadata["k"] != "v" {
		t.Errorf("parsed %+v", ok)
	}
	if len(rej) != 2 || rej[0].Line != 4 || !strings.Contains(rej[0].Reason, "duplicates line 1") || rej[1].Line != 5 {
		t.Errorf("rejected %+v", rej)
	}
	// The decoder's own prefix ("proto:", with a space that may be a
	// no-break one) is not the importer's business.
	if len(rej) == 2 && (!strings.HasPrefix(rej[1].Reason, "invalid JSON: ") || strings.Contains(rej[1].Reason, "proto:") || strings.Contains(rej[1].Reason, "\u00a0")) {
		t.Errorf("line 5's reason %q names the decoder", rej[1].Reason)
	}
	if _, _, err := ParseJSONL(strings.NewReader(strings.Repeat("x", MaxLineBytes+1)), map[string]int{}); err == nil {
		t.Error("an oversized line was accepted")
	}
	// Half a surrogate pair: protojson said "unexpected EOF" or "invalid
	// escape code".
	for _, text := range []string{`\udc00`, `bad \udc00 here`, `\ud83d`} {
		_, rej, err := ParseJSONL(strings.NewReader(`{"id":"s","messages":[{"role":"customer","text":"`+text+`"}]}`), map[string]int{})
		if err != nil || len(rej) != 1 || !strings.Contains(rej[0].Reason, "is half of a UTF-16 surrogate pair") {
			t.Errorf("%s: rejected %+v, %v", text, rej, err)
		}
	}
}

func TestSampleIsValid(t *testing.T) {
	t.Parallel()
	s, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	if len(s) < 40 {
		t.Fatalf("%d sample conversations", len(s))
	}
	channels := map[string]bool{}
	for _, c := range s {
		channels[c.Channel] = true
		if len(c.Messages) < 3 || c.Messages[0].Time.IsZero() {
			t.Errorf("thin sample conversation %s", c.ID)
		}
	}
	if len(channels) < 3 {
		t.Errorf("sample uses only channels %v", channels)
	}
}

var (
	acme   = &commonv1.Scope{TenantId: "acme", ProjectId: "p"}
	globex = &commonv1.Scope{TenantId: "globex"}
)

func TestStoreFindsWithPlanFilters(t *testing.T) {
	t.Parallel()
	testkit.EachWriterMode(t, testStoreFindsWithPlanFilters)
}

func testStoreFindsWithPlanFilters(t *testing.T, db *mongo.Database) {
	ctx := context.Background()
	s := NewStore(db)
	if err := s.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	n, err := s.LoadSample(ctx, acme)
	if err != nil || n < 40 {
		t.Fatalf("LoadSample: %d, %v", n, err)
	}
	if n, err := s.LoadSample(ctx, acme); err != nil || n != 0 {
		t.Errorf("second LoadSample stored %d (%v); it must leave a non-empty scope alone", n, err)
	}
	sample, _ := Sample()
	other := sample[0]
	other.Channel = "chat"
	if _, err := s.Upsert(ctx, globex, []Conversation{other}); err != nil {
		t.Fatal(err)
	}
	// The reference answers, computed in Go from the sample itself.
	pick := func(keep func(Conversation) bool) []string {
		var out []string
		for _, c := range sample {
			if keep(c) {
				out = append(out, c.ID)
			}
		}
		slices.Sort(out)
		return out
	}
	cutoff := time.Date(2024, 5, 12, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		query string
		want  []string
	}{
		{"all", `{}`, pick(func(Conversation) bool { return true })},
		{"channel", `{"channel": "email"}`, pick(func(c Conversation) bool { return c.Channel == "email" })},
		{"started after", `{"started_at": {"$gte": "2024-05-12T00:00:00Z"}}`,
			pick(func(c Conversation) bool { return !c.Messages[0].Time.Before(cutoff) })},
		{"word in any message", `{"messages.text": {"$regex": "refund", "$options": "i"}}`, pick(func(c Conversation) bool {
			return slices.ContainsFunc(c.Messages, func(m Turn) bool { return strings.Contains(strings.ToLower(m.Text), "refund") })
		})},
		{"metadata", `{"metadata.priority": {"$in": ["urgent", "high"]}, "message_count": {"$gte": 5}}`, pick(func(c Conversation) bool {
			p := c.Metadata["priority"]
			return (p == "urgent" || p == "high") && len(c.Messages) >= 5
		})},
		{"tag", `{"metadata.tags": {"$all": ["refund"]}}`, pick(func(c Conversation) bool {
			tags, _ := c.Metadata["tags"].([]any)
			return slices.Contains(tags, any("refund"))
		})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := plan.Compile(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Find(ctx, acme, f, nil, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(tc.want) == 0 || !slices.Equal(got, tc.want) {
				t.Errorf("Find(%s) = %v, want %v", tc.query, got, tc.want)
			}
		})
	}
	all := pick(func(Conversation) bool { return true })
	got, err := s.Find(ctx, acme, nil, all[:3], 2)
	if err != nil || !slices.Equal(got, all[3:5]) {
		t.Errorf("exclude+limit: %v (%v), want %v", got, err, all[3:5])
	}
	got, err = s.Find(ctx, globex, nil, nil, 100)
	if err != nil || !slices.Equal(got, []string{other.ID}) {
		t.Errorf("other scope sees %v (%v)", got, err)
	}
	convs, err := s.Get(ctx, acme, []string{all[2], all[0]})
	if err != nil || convs[0].ID != all[2] || convs[1].ID != all[0] || len(convs[0].Messages) == 0 || convs[0].Messages[0].Time.IsZero() {
		t.Errorf("Get: %+v (%v)", convs, err)
	}
	if _, err := s.Get(ctx, globex, []string{all[2]}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get across scopes: %v", err)
	}
}
