package up

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
)

// The API keys of the contract tests: one bound to a project, one to the
// whole tenant.
const (
	projectKey = "kp-secret"
	tenantKey  = "kt-secret"
)

// openAPIOp is one operation of /openapi.json, as the tests read it.
type openAPIOp struct {
	method, path, id string
	params           []openAPIParam
	body             string // the body schema's definition name, if any
}

type openAPIParam struct {
	Name      string         `json:"name"`
	In        string         `json:"in"`
	Type      string         `json:"type"`
	Format    string         `json:"format"`
	Schema    map[string]any `json:"schema"`
	Maximum   *float64       `json:"maximum"`
	Minimum   *float64       `json:"minimum"`
	MaxLength *int           `json:"maxLength"`
	Pattern   string         `json:"pattern"`
	Enum      []string       `json:"enum"`
	Items     map[string]any `json:"items"`
}

type openAPIDoc struct {
	ops  []openAPIOp
	defs map[string]map[string]any
}

// loadOpenAPI reads the document the running gateway serves: every route a
// client can call is in it, so a new route cannot skip these tests.
func loadOpenAPI(t *testing.T, gw string) openAPIDoc {
	t.Helper()
	resp, err := http.Get(gw + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw struct {
		Paths map[string]map[string]struct {
			OperationID string         `json:"operationId"`
			Parameters  []openAPIParam `json:"parameters"`
		} `json:"paths"`
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
		t.Fatal(err)
	}
	doc := openAPIDoc{defs: raw.Definitions}
	for path, ops := range raw.Paths {
		for method, op := range ops {
			o := openAPIOp{method: strings.ToUpper(method), path: path, id: op.OperationID, params: op.Parameters}
			for _, p := range op.Parameters {
				if p.In == "body" {
					o.body = strings.TrimPrefix(fmt.Sprint(p.Schema["$ref"]), "#/definitions/")
				}
			}
			doc.ops = append(doc.ops, o)
		}
	}
	sort.Slice(doc.ops, func(i, j int) bool { return doc.ops[i].path+doc.ops[i].method < doc.ops[j].path+doc.ops[j].method })
	return doc
}

// url fills the operation's path parameters (with value, or "x") and adds
// the query.
func (o openAPIOp) url(gw string, pathValue map[string]string, q url.Values) string {
	p := o.path
	for _, prm := range o.params {
		if prm.In == "path" {
			v, ok := pathValue[prm.Name]
			if !ok {
				v = "x"
			}
			p = strings.ReplaceAll(p, "{"+prm.Name+"}", v)
		}
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return gw + p
}

// apiError is the gateway's error body.
type apiError struct {
	Code    codes.Code `json:"code"`
	Message string     `json:"message"`
	Details []struct {
		Type            string `json:"@type"`
		FieldViolations []struct {
			Field string `json:"field"`
		} `json:"fieldViolations"`
	} `json:"details"`
}

// names reports whether the error names field (a dotted path in JSON or
// proto names, list indexes ignored), in its message or a field violation.
func (e apiError) names(field string) bool {
	want := canonicalField(field)
	if strings.Contains(canonicalField(e.Message), want) {
		return true
	}
	for _, d := range e.Details {
		for _, v := range d.FieldViolations {
			if strings.Contains(canonicalField(v.Field), want) {
				return true
			}
		}
	}
	return false
}

// canonicalField lowercases and drops '_' and list indexes, so page_size,
// pageSize and messages[0].role / messages.role compare equal.
func canonicalField(s string) string {
	var b strings.Builder
	skip := false
	for _, c := range strings.ToLower(s) {
		switch {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case skip || c == '_':
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// call sends one request with the key and returns the status and the
// decoded error body (zero for a success).
func call(t *testing.T, method, target, key, body string) (int, apiError, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e apiError
	if resp.StatusCode >= 400 {
		_ = json.Unmarshal(raw, &e)
	}
	return resp.StatusCode, e, string(raw)
}

// probe is one malformed request and the field its error must name.
type probe struct {
	what, method, target, body, field string
}

// badValues returns values that break a parameter's or property's schema,
// each with what it breaks: a wrong kind, and each declared constraint.
func badValues(typ, format string, enum []string, minimum, maximum *float64, maxLength *int, pattern string) map[string]string {
	out := map[string]string{}
	switch {
	case typ == "integer" || format == "int64" || format == "uint64" || format == "int32":
		out["not a number"] = `"abc"`
	case typ == "number":
		out["not a number"] = `"abc"`
	case typ == "boolean":
		out["not a boolean"] = `"maybe"`
	case format == "date-time":
		out["not a timestamp"] = `"yesterday"`
	case len(enum) > 0:
		out["not an enum value"] = `"NOT_A_VALUE"`
	case typ == "string" && format == "byte":
		out["not base64"] = `"***"`
	case typ == "string":
		out["not a string"] = `{}`
	case typ == "array":
		out["not an array"] = `"x"`
	case typ == "object":
		out["not an object"] = `"x"`
	}
	if minimum != nil {
		out["below the minimum"] = fmt.Sprint(*minimum - 1)
	}
	if maximum != nil {
		out["above the maximum"] = fmt.Sprint(*maximum + 1)
	}
	if maxLength != nil {
		b, _ := json.Marshal(strings.Repeat("x", *maxLength+1))
		out["longer than maxLength"] = string(b)
	}
	if pattern != "" {
		out["against the pattern"] = `"a.b c"`
	}
	return out
}

// schemaProbes adds, for each property of the definition def (and of the
// definitions its properties refer to, prefix naming the path), a body
// that sets it to each bad value.
func schemaProbes(doc openAPIDoc, op openAPIOp, target, def, prefix string, depth int, add func(probe)) {
	props, _ := doc.defs[def]["properties"].(map[string]any)
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		prop, _ := props[name].(map[string]any)
		path := prefix + name
		ref := strings.TrimPrefix(fmt.Sprint(prop["$ref"]), "#/definitions/")
		typ, _ := prop["type"].(string)
		format, _ := prop["format"].(string)
		switch {
		case prop["$ref"] != nil && doc.defs[ref]["type"] == "object" && doc.defs[ref]["properties"] != nil:
			typ = "object"
			if depth < 2 {
				schemaProbes(doc, op, target, ref, path+".", depth+1, add)
			}
		case prop["$ref"] != nil && doc.defs[ref]["enum"] != nil:
			typ = "enum"
		case prop["$ref"] != nil || (typ == "object" && prop["properties"] == nil && prop["additionalProperties"] == nil):
			continue // Struct, Value, Any: any JSON is valid
		}
		var enum []string
		if typ == "enum" {
			enum = []string{"?"}
			typ = "string"
		}
		num := func(k string) *float64 {
			if v, ok := prop[k].(float64); ok {
				return &v
			}
			return nil
		}
		var maxLen *int
		if v, ok := prop["maxLength"].(float64); ok {
			n := int(v)
			maxLen = &n
		}
		pattern, _ := prop["pattern"].(string)
		for what, v := range badValues(typ, format, enum, num("minimum"), num("maximum"), maxLen, pattern) {
			add(probe{what: path + " " + what, method: op.method, target: target, body: nest(path, v), field: path})
		}
	}
}

// nest builds {"a":{"b":v}} for the path a.b.
func nest(path, v string) string {
	parts := strings.Split(path, ".")
	s := v
	for i := len(parts) - 1; i >= 0; i-- {
		k, _ := json.Marshal(parts[i])
		s = "{" + string(k) + ":" + s + "}"
	}
	return s
}

// TestEveryRouteRefusesBadInputByName sweeps every operation of the served
// OpenAPI document on the running mesh with malformed and wrong-kind input:
// path parameters and query values that are not UTF-8, unknown query
// parameters and body fields, values of the wrong JSON kind, values past
// each declared constraint, and bodies that are not JSON objects. None may
// be a 5xx, each must be a 4xx whose error names the field.
func TestEveryRouteRefusesBadInputByName(t *testing.T) {
	gw, _, _ := startMeshWith(t, t.TempDir(), map[string]string{
		"MODELGATEWAY_PROVIDER": "sim",
		"GATEWAY_API_KEYS":      projectKey + "=acme:alpha@p," + tenantKey + "=acme@t",
	})
	waitServing(t, gw)
	doc := loadOpenAPI(t, gw)

	var probes []probe
	for _, op := range doc.ops {
		add := func(p probe) { probes = append(probes, p) }
		for _, prm := range op.params {
			if prm.In == "path" {
				add(probe{what: "path " + prm.Name + " not UTF-8", method: op.method, target: op.url(gw, map[string]string{prm.Name: "%FF%FE"}, nil), field: prm.Name, body: bodyFor(op)})
			}
		}
		base := op.url(gw, nil, nil)
		add(probe{what: "unknown query parameter", method: op.method, target: base + "?notAParam=1", field: "notAParam", body: bodyFor(op)})
		for _, prm := range op.params {
			if prm.In != "query" {
				continue
			}
			add(probe{what: prm.Name + " not UTF-8", method: op.method, target: base + "?" + prm.Name + "=%FF", field: prm.Name})
			typ := prm.Type
			if typ == "array" {
				typ, _ = prm.Items["type"].(string)
			}
			for what, v := range badValues(typ, prm.Format, prm.Enum, prm.Minimum, prm.Maximum, prm.MaxLength, prm.Pattern) {
				if what == "not a string" {
					continue // every query value is text
				}
				var s string
				if json.Unmarshal([]byte(v), &s) != nil {
					s = v // numbers go as written; {} as text
				}
				add(probe{what: prm.Name + " " + what, method: op.method, target: base + "?" + url.Values{prm.Name: {s}}.Encode(), field: prm.Name})
			}
		}
		if op.body != "" {
			add(probe{what: "body not JSON", method: op.method, target: base, body: `{"`, field: "request body"})
			add(probe{what: "body an array", method: op.method, target: base, body: `[]`, field: "request body"})
			add(probe{what: "unknown body field", method: op.method, target: base, body: `{"notAField":1}`, field: "notAField"})
			schemaProbes(doc, op, base, op.body, "", 0, add)
		}
	}

	fiveXX, unnamed := 0, 0
	for _, p := range probes {
		status, e, raw := call(t, p.method, p.target, tenantKey, p.body)
		switch {
		case status >= 500:
			fiveXX++
			t.Errorf("%s %s (%s): %d %s", p.method, p.target, p.what, status, raw)
		case status < 400:
			t.Errorf("%s %s (%s): accepted with %d: %s", p.method, p.target, p.what, status, raw)
		case !e.names(p.field):
			unnamed++
			t.Errorf("%s %s (%s): %d does not name %q: %s", p.method, p.target, p.what, status, p.field, raw)
		}
	}
	t.Logf("route sweep: %d operations, %d probes, %d answered 5xx, %d did not name the field", len(doc.ops), len(probes), fiveXX, unnamed)
}

// bodyFor is an empty JSON object for operations that take a body.
func bodyFor(op openAPIOp) string {
	if op.body != "" {
		return "{}"
	}
	return ""
}

// scopedOp is how an operation takes a scope: in its query or its body.
func scopedOp(doc openAPIDoc, op openAPIOp) (inQuery, inBody bool) {
	for _, p := range op.params {
		if p.In == "query" && p.Name == "scope.projectId" {
			inQuery = true
		}
	}
	if props, _ := doc.defs[op.body]["properties"].(map[string]any); props != nil {
		_, inBody = props["scope"]
	}
	return inQuery, inBody
}

// TestProjectScopedKeyIsHeldToItsProject: on every operation that takes a
// scope, a key bound to project alpha naming project beta (in the query or
// the body) is a 400 naming scope.projectId, before anything else is
// looked at; the same key naming its own project, and a tenant-wide key
// naming any project, pass the scope check. Then data: what a tenant-wide
// key stores in beta, the alpha key cannot read, list, search or delete.
func TestProjectScopedKeyIsHeldToItsProject(t *testing.T) {
	gw, _, _ := startMeshWith(t, t.TempDir(), map[string]string{
		"MODELGATEWAY_PROVIDER": "sim",
		"GATEWAY_API_KEYS":      projectKey + "=acme:alpha@p," + tenantKey + "=acme@t",
	})
	waitServing(t, gw)
	doc := loadOpenAPI(t, gw)

	const scopeRefusal = "does not match the project of the API key"
	request := func(op openAPIOp, inQuery bool, project string) (string, string) {
		if inQuery {
			return op.url(gw, nil, url.Values{"scope.projectId": {project}}), bodyFor(op)
		}
		return op.url(gw, nil, nil), `{"scope":{"projectId":"` + project + `"}}`
	}
	var matrix []string
	scoped := 0
	for _, op := range doc.ops {
		inQuery, inBody := scopedOp(doc, op)
		if !inQuery && !inBody {
			matrix = append(matrix, fmt.Sprintf("%-6s %-55s no scope in its contract", op.method, op.path))
			continue
		}
		scoped++
		target, body := request(op, inQuery, "beta")
		status, e, raw := call(t, op.method, target, projectKey, body)
		if status != http.StatusBadRequest || !strings.Contains(e.Message, scopeRefusal) || !e.names("scope.projectId") {
			t.Errorf("%s %s: alpha key naming beta: %d %s", op.method, op.path, status, raw)
		}
		row := fmt.Sprintf("%-6s %-55s alpha key→beta %d", op.method, op.path, status)
		for _, c := range []struct{ key, project, label string }{{projectKey, "alpha", "alpha key→alpha"}, {tenantKey, "beta", "tenant key→beta"}} {
			target, body := request(op, inQuery, c.project)
			status, e, raw := call(t, op.method, target, c.key, body)
			if strings.Contains(e.Message, scopeRefusal) || status >= 500 {
				t.Errorf("%s %s: %s refused or failed: %d %s", op.method, op.path, c.label, status, raw)
			}
			row += fmt.Sprintf(", %s %d", c.label, status)
		}
		matrix = append(matrix, row)
	}
	t.Logf("project-scope matrix (%d operations take a scope, %d do not):\n%s", scoped, len(doc.ops)-scoped, strings.Join(matrix, "\n"))
	if scoped < 30 {
		t.Fatalf("only %d operations take a scope: the document changed shape", scoped)
	}

	// Data in beta, stored with the tenant-wide key.
	status, _, raw := call(t, "POST", gw+"/v1/documents", tenantKey,
		`{"scope":{"projectId":"beta"},"sourceType":"SOURCE_TYPE_WIKI","title":"Beta runbook","rawContent":"The beta zebra runbook says restart the ingest worker."}`)
	var created struct{ Document struct{ ID string } }
	if json.Unmarshal([]byte(raw), &created); status != http.StatusOK || created.Document.ID == "" {
		t.Fatalf("ingest into beta: %d %s", status, raw)
	}
	id := created.Document.ID
	reads := []struct {
		what, method, path, body string
		key                      string
		wantStatus               int
		wantIn, wantNotIn        string
	}{
		{"tenant key reads beta's document", "GET", "/v1/documents/" + id + "?scope.projectId=beta", "", tenantKey, 200, id, ""},
		{"alpha key reads it", "GET", "/v1/documents/" + id, "", projectKey, 404, "", ""},
		{"alpha key lists", "GET", "/v1/documents", "", projectKey, 200, "", id},
		{"alpha key searches", "POST", "/v1/search", `{"query":"zebra runbook"}`, projectKey, 200, "", id},
		{"tenant key searches beta", "POST", "/v1/search", `{"query":"zebra runbook","scope":{"projectId":"beta"}}`, tenantKey, 200, id, ""},
		{"alpha key deletes it", "DELETE", "/v1/documents/" + id, "", projectKey, 404, "", ""},
		{"alpha key creates in beta", "POST", "/v1/documents", `{"scope":{"projectId":"beta"},"sourceType":"SOURCE_TYPE_WIKI","rawContent":"x"}`, projectKey, 400, scopeRefusal, ""},
		{"the document survived", "GET", "/v1/documents/" + id + "?scope.projectId=beta", "", tenantKey, 200, id, ""},
	}
	for _, r := range reads {
		status, _, raw := call(t, r.method, gw+r.path, r.key, r.body)
		if status != r.wantStatus || (r.wantIn != "" && !strings.Contains(raw, r.wantIn)) || (r.wantNotIn != "" && strings.Contains(raw, r.wantNotIn)) {
			t.Errorf("%s: %d %s", r.what, status, raw)
		}
	}
}
