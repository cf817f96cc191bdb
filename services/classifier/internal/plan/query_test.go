package plan

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
)

func TestCompileAccepts(t *testing.T) {
	t.Parallel()
	may1 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		query string
		want  bson.D
	}{
		{"empty", ``, bson.D{}},
		{"match all", `{}`, bson.D{}},
		{"equality", `{"channel": "chat"}`, bson.D{{Key: "channel", Value: "chat"}}},
		{"keys sorted", `{"customer": "c1", "channel": "chat"}`, bson.D{{Key: "channel", Value: "chat"}, {Key: "customer", Value: "c1"}}},
		{"time range", `{"started_at": {"$gte": "2024-05-01T00:00:00Z", "$lt": "2024-05-08T00:00:00+00:00"}}`,
			bson.D{{Key: "started_at", Value: bson.D{{Key: "$gte", Value: may1}, {Key: "$lt", Value: may1.AddDate(0, 0, 7)}}}}},
		{"integer count", `{"message_count": {"$gt": 3}}`, bson.D{{Key: "message_count", Value: bson.D{{Key: "$gt", Value: int64(3)}}}}},
		{"regex", `{"messages.text": {"$regex": "refund|chargeback", "$options": "i"}}`,
			bson.D{{Key: "messages.text", Value: bson.D{{Key: "$options", Value: "i"}, {Key: "$regex", Value: "refund|chargeback"}}}}},
		{"in list", `{"id": {"$in": ["a", "b"]}}`, bson.D{{Key: "id", Value: bson.D{{Key: "$in", Value: bson.A{"a", "b"}}}}}},
		{"metadata scalar", `{"metadata.priority": "high", "metadata.sla.breached": true}`,
			bson.D{{Key: "metadata.priority", Value: "high"}, {Key: "metadata.sla.breached", Value: true}}},
		{"logical", `{"$or": [{"channel": "chat"}, {"$and": [{"channel": "email"}, {"metadata.tags": {"$all": ["refund"]}}]}]}`,
			bson.D{{Key: "$or", Value: bson.A{
				bson.D{{Key: "channel", Value: "chat"}},
				bson.D{{Key: "$and", Value: bson.A{bson.D{{Key: "channel", Value: "email"}}, bson.D{{Key: "metadata.tags", Value: bson.D{{Key: "$all", Value: bson.A{"refund"}}}}}}}},
			}}}},
		{"not", `{"channel": {"$not": {"$in": ["phone"]}}}`, bson.D{{Key: "channel", Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$in", Value: bson.A{"phone"}}}}}}}},
		{"exists", `{"metadata.priority": {"$exists": false}}`, bson.D{{Key: "metadata.priority", Value: bson.D{{Key: "$exists", Value: false}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Compile(tc.query)
			if err != nil {
				t.Fatalf("Compile(%s): %v", tc.query, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Compile(%s) (-want +got):\n%s", tc.query, diff)
			}
		})
	}
}

func TestCompileRefuses(t *testing.T) {
	t.Parallel()
	deep := `{"channel": "x"}`
	for range MaxDepth + 1 {
		deep = `{"$and": [` + deep + `]}`
	}
	var many []string
	for i := range MaxList + 1 {
		many = append(many, fmt.Sprintf("%q", fmt.Sprint(i)))
	}
	tests := []struct {
		name, query, path, reason string
	}{
		{"where", `{"$where": "sleep(1000)"}`, "query.$where", "not allowed"},
		{"expr", `{"$expr": {"$function": {"body": "x", "args": [], "lang": "js"}}}`, "query.$expr", "not allowed"},
		{"function in field", `{"messages.text": {"$function": {"body": "x"}}}`, "query.messages.text.$function", "not allowed"},
		{"json schema", `{"$jsonSchema": {}}`, "query.$jsonSchema", "not allowed"},
		{"text search", `{"$text": {"$search": "refund"}}`, "query.$text", "not allowed"},
		{"where nested in or", `{"$or": [{"channel": "chat"}, {"$where": "true"}]}`, "query.$or[1].$where", "not allowed"},
		{"unknown field", `{"password": "x"}`, "query.password", "unknown field"},
		{"scope field", `{"tenant_id": "other"}`, "query.tenant_id", "unknown field"},
		{"id field", `{"_id": "x"}`, "query._id", "unknown field"},
		{"metadata too deep", `{"metadata.a.b.c.d": 1}`, "query.metadata.a.b.c.d", "unknown field"},
		{"metadata bad key", `{"metadata.a$b": 1}`, "query.metadata.a$b", "unknown field"},
		{"embedded document", `{"channel": {"name": "chat"}}`, "query.channel.name", "nested documents"},
		{"embedded document in eq", `{"channel": {"$eq": {"$ne": 1}}}`, "query.channel.$eq", "nested documents"},
		{"array literal", `{"channel": ["a"]}`, "query.channel", "arrays"},
		{"backreference", `{"messages.text": {"$regex": "(a)\\1"}}`, "query.messages.text.$regex", "RE2"},
		{"long pattern", `{"messages.text": {"$regex": "` + strings.Repeat("a", MaxPattern+1) + `"}}`, "query.messages.text.$regex", "longer"},
		{"regex on number", `{"message_count": {"$regex": "1"}}`, "query.message_count.$regex", "text fields"},
		{"bad options", `{"messages.text": {"$regex": "a", "$options": "x"}}`, "query.messages.text.$options", "flags"},
		{"options alone", `{"messages.text": {"$options": "i"}}`, "query.messages.text.$options", "next to $regex"},
		{"bad time", `{"started_at": {"$gte": "last week"}}`, "query.started_at.$gte", "RFC 3339"},
		{"number for time", `{"started_at": {"$gte": 1714521600}}`, "query.started_at.$gte", "RFC 3339"},
		{"string for count", `{"message_count": "3"}`, "query.message_count", "number"},
		{"bool for string", `{"channel": true}`, "query.channel", "booleans"},
		{"exists not bool", `{"channel": {"$exists": 1}}`, "query.channel.$exists", "true or false"},
		{"in not array", `{"channel": {"$in": "chat"}}`, "query.channel.$in", "array"},
		{"in too long", `{"id": {"$in": [` + strings.Join(many, ",") + `]}}`, "query.id.$in", "more than"},
		{"empty or", `{"$or": []}`, "query.$or", "non-empty"},
		{"or of strings", `{"$or": ["a"]}`, "query.$or[0]", "query object"},
		{"too deep", deep, "", "deeper"},
		{"not an object", `["a"]`, "query", "JSON object"},
		{"invalid JSON", `{"channel": }`, "query", "not valid JSON"},
		{"trailing data", `{} {}`, "query", "trailing"},
		{"empty operator object", `{"channel": {}}`, "query.channel", "empty"},
		{"not with literal", `{"channel": {"$not": "chat"}}`, "query.channel.$not", "operator object"},
		{"size not allowed", `{"messages.role": {"$size": 2}}`, "query.messages.role.$size", "not allowed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Compile(tc.query)
			if err == nil {
				t.Fatalf("Compile(%s) = %v, want refusal", tc.query, got)
			}
			var qe *Error
			if !errors.As(err, &qe) || !errors.Is(err, ErrRefused) {
				t.Fatalf("error %v (%T) is not a refusal", err, err)
			}
			if tc.path != "" && qe.Path != tc.path {
				t.Errorf("path %q, want %q (%v)", qe.Path, tc.path, err)
			}
			if !strings.Contains(qe.Reason, tc.reason) {
				t.Errorf("reason %q, want it to mention %q", qe.Reason, tc.reason)
			}
		})
	}
}

func TestCompileBoundsSize(t *testing.T) {
	t.Parallel()
	var clauses []string
	for i := range MaxNodes {
		clauses = append(clauses, fmt.Sprintf(`{"id": "c%d"}`, i))
	}
	// Split over several $or clauses to stay under MaxList per list.
	q := `{"$and": [{"$or": [` + strings.Join(clauses[:99], ",") + `]}, {"$or": [` + strings.Join(clauses[99:198], ",") + `]}, {"$or": [` + strings.Join(clauses[198:], ",") + `]}]}`
	if _, err := Compile(q); err == nil || !strings.Contains(err.Error(), "elements") {
		t.Errorf("a query of %d+ elements: %v", MaxNodes, err)
	}
	if _, err := Compile(`{"channel": "` + strings.Repeat("x", MaxQueryBytes) + `"}`); err == nil {
		t.Error("an oversized query was accepted")
	}
}

func TestDescribeNamesEveryField(t *testing.T) {
	t.Parallel()
	d := Describe()
	for _, f := range Fields {
		if !strings.Contains(d, f.Name) {
			t.Errorf("Describe lacks %s", f.Name)
		}
	}
	for _, op := range Operators {
		if !strings.Contains(d, op) {
			t.Errorf("Describe lacks %s", op)
		}
	}
}
