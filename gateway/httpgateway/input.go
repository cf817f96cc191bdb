package httpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/gateway/openapi"
	"github.com/agentmesh/agentmesh/libs/frontdoor"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// readBody reads a request's whole body before any handler runs, bounded in
// size (413 past MaxBodyBytes) and in time (408 past BodyTimeout): a client
// that declares a body and never sends it gives up its connection and
// goroutine after BodyTimeout instead of holding them, and shutdown does not
// wait for it. Streams are not affected: the deadline covers the body only
// and is lifted before the handler runs, and responses have no write
// deadline.
func (g *gateway) readBody(next http.Handler) http.Handler {
	return g.readBodyAs(writeStatus, next)
}

// readBodyAs is readBody answering failures with fail.
func (g *gateway) readBodyAs(fail statusWriter, next http.Handler) http.Handler {
	return frontdoor.ReadBody(frontdoor.BodyLimits{MaxBytes: g.cfg.MaxBodyBytes, Timeout: g.cfg.BodyTimeout}, fail, next)
}

// methodOverrideHeader is the header grpc-gateway would let a form-encoded
// POST use to act as another method.
const methodOverrideHeader = "X-HTTP-Method-Override"

// refuseMethodOverride answers 400 naming the header to any request that
// carries X-HTTP-Method-Override, whatever its value: the API takes each
// operation on its own method only, so a POST cannot act as a DELETE, or
// as a GET whose parameters skip checkRequestLine. (The ServeMux ignores
// the header too; the 400 tells the client instead of serving the POST.)
func refuseMethodOverride(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := r.Header[textproto.CanonicalMIMEHeaderKey(methodOverrideHeader)]; ok {
			writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument(methodOverrideHeader,
				"is not supported; send the request with the HTTP method of the operation (e.g. DELETE /v1/conversations/{conversationId})")))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headAsGet serves HEAD on the API's GET routes as GET without the body
// (net/http drops what a HEAD's handler writes), as RFC 9110 asks of every
// resource that takes GET. A watch streams until its subject ends, which a
// HEAD cannot wait for: HEAD on one is a 405 allowing GET. A path with no
// GET route passes through, for the router to answer 404 or 405.
func (g *gateway) headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead {
			next.ServeHTTP(w, r)
			return
		}
		rt, _ := g.routes.match(http.MethodGet, r.URL.Path)
		if rt == nil {
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasSuffix(rt.template, ":watch") {
			w.Header().Set("Allow", http.MethodGet)
			writeStatus(w, http.StatusMethodNotAllowed, status.New(codes.Unimplemented,
				"Method Not Allowed: HEAD "+r.URL.Path+" (a watch streams: it takes GET)"))
			return
		}
		get := r.Clone(r.Context())
		get.Method = http.MethodGet
		next.ServeHTTP(w, get)
	})
}

// gatewayQueryParams are query parameters the gateway itself reads on
// every route: lastEventId stands for the Last-Event-ID header, for
// EventSource clients that cannot set headers.
var gatewayQueryParams = map[string]bool{"lastEventId": true}

// checkRequestLine refuses, with 400 naming the parameter, what the
// services could not take or would silently ignore: a path parameter or
// query value that is not UTF-8 (gRPC strings must be), a query
// parameter the route does not have (a typo is an error, as an unknown body
// field is), and one that takes a single value given more than once. On
// routes with an afterSequence parameter it maps an
// EventSource reconnect onto it: the Last-Event-ID header (or lastEventId)
// becomes afterSequence, or replaces the one the URL holds. Requests that
// match no route pass through, for the router to answer 404 or 405.
func (g *gateway) checkRequestLine(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rt, params := g.routes.match(r.Method, r.URL.Path)
		if rt == nil {
			if !utf8.ValidString(r.URL.Path) {
				writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument("path", "is not valid UTF-8")))
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		for _, p := range params {
			if !utf8.ValidString(p.value) {
				writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument(p.name, "path parameter is not valid UTF-8")))
				return
			}
		}
		q, err := url.ParseQuery(r.URL.RawQuery)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument("query", "%v", err)))
			return
		}
		for _, key := range sortedKeys(q) {
			name := key
			if i := strings.IndexByte(key, '['); i > 0 && strings.HasSuffix(key, "]") {
				name = key[:i] // map entries: field[key]=value
			}
			if !utf8.ValidString(key) {
				writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument("query", "a parameter name is not valid UTF-8")))
				return
			}
			if !gatewayQueryParams[key] && !rt.query[jsonFieldPath(name)] {
				writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument(key, "unknown query parameter of %s %s%s", rt.method, rt.template, rt.knownQuery())))
				return
			}
			for _, v := range q[key] {
				if !utf8.ValidString(v) {
					writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument(key, "query value is not valid UTF-8")))
					return
				}
			}
		}
		if err := rt.checkSingleValues(q); err != nil {
			writeStatus(w, http.StatusBadRequest, grpcStatus(err))
			return
		}
		if err := rt.checkValues(q); err != nil {
			writeStatus(w, http.StatusBadRequest, grpcStatus(err))
			return
		}
		if rt.query["afterSequence"] {
			if id, from := lastEventID(r, q); id != "" {
				if _, err := strconv.ParseUint(id, 10, 64); err != nil {
					writeStatus(w, http.StatusBadRequest, grpcStatus(grpcx.InvalidArgument(from, "must be the id of an event of this stream (a number)")))
					return
				}
				// The service's refusal of the id names it as the client
				// sent it, not as afterSequence (handleError).
				r = r.WithContext(context.WithValue(r.Context(), cursorFromKey{}, from))
				// An EventSource reconnects to the URL it was opened with,
				// afterSequence included, sending the id of the last event
				// it got, which came after the URL's: that is where the
				// client is. (Event ids are not ordered, see README "Event
				// ids": which is later cannot be read off the numbers.)
				q.Del("after_sequence")
				q.Set("afterSequence", id)
				q.Del("lastEventId")
				r.URL.RawQuery = q.Encode()
			}
		}
		next.ServeHTTP(w, r)
	})
}

// checkSingleValues refuses a field that is not repeated given more than
// one value in q, under one name (?scope.projectId=a&scope.projectId=b) or
// its two spellings (?pageSize=1&page_size=2), naming it as the request
// wrote it, with a fieldViolations detail; grpc-gateway would refuse them
// naming only the proto field's last part (`too many values for field
// "project_id"`, `duplicate field "page_size"`). Map entries
// (field[key]=value) are left to grpc-gateway.
func (rt *route) checkSingleValues(q url.Values) error {
	names := map[string][]string{} // field's JSON path → the keys naming it
	count := map[string]int{}
	for _, key := range sortedKeys(q) {
		field := jsonFieldPath(key)
		if !rt.query[field] || rt.repeated[field] {
			continue // the gateway's own, a repeated field, or a map entry
		}
		names[field] = append(names[field], key)
		count[field] += len(q[key])
	}
	for _, field := range sortedKeys(names) {
		if n, keys := count[field], names[field]; n > 1 {
			how := ""
			if len(keys) > 1 {
				how = " (as " + strings.Join(keys, " and ") + ")"
			}
			return grpcx.InvalidArgument(keys[0], "takes one value, got %d%s", n, how)
		}
	}
	return nil
}

// lastEventID is where an SSE client that reconnects says it is, and
// where it said it: the lastEventId query parameter (q, of r's URL), for
// EventSource clients that cannot set headers, else the Last-Event-ID
// header; "" when neither.
func lastEventID(r *http.Request, q url.Values) (id, from string) {
	if id := strings.TrimSpace(q.Get("lastEventId")); id != "" {
		return id, "lastEventId"
	}
	return strings.TrimSpace(r.Header.Get("Last-Event-ID")), "Last-Event-ID"
}

// cursorFromKey marks a request whose afterSequence the gateway took from
// Last-Event-ID or lastEventId: its value names which.
type cursorFromKey struct{}

func grpcStatus(err error) *status.Status { return status.Convert(err) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonFieldPath turns a field path written with proto names (page_size,
// scope.project_id) into JSON names (pageSize, scope.projectId), as
// protobuf derives them; a path already in JSON names is unchanged.
func jsonFieldPath(path string) string {
	var b strings.Builder
	upper := false
	for _, c := range path {
		switch {
		case c == '_':
			upper = true
			continue
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		}
		upper = false
		b.WriteRune(c)
	}
	return b.String()
}

// route is one operation of the OpenAPI document.
type route struct {
	method   string
	template string
	segs     []routeSeg
	// query holds the operation's query parameters by JSON name.
	query map[string]bool
	// repeated holds those of them that take several values (repeated
	// fields: ?edgeTypes=a&edgeTypes=b).
	repeated map[string]bool
	// values holds what the values of those of them that are not any
	// string must be (checkValues).
	values map[string]valueRule
}

// valueRule is what a query parameter's values must be, from its OpenAPI
// type, format and enum.
type valueRule struct {
	format string   // "int32", "uint64", "date-time" or "" (any)
	enum   []string // the allowed names, when the field is an enum
}

// check reports what is wrong with value v of parameter key, or nil.
func (r valueRule) check(key, v string) error {
	switch r.format {
	case "int32":
		if _, err := strconv.ParseInt(v, 10, 32); err != nil {
			return grpcx.InvalidArgument(key, "%q is not a whole number%s", v, outOfRange(err, " from -2147483648 to 2147483647"))
		}
	case "uint64":
		if _, err := strconv.ParseUint(v, 10, 64); err != nil {
			return grpcx.InvalidArgument(key, "%q is not a sequence number (a whole number from 0)%s", v, outOfRange(err, " below 2^64"))
		}
	case "date-time":
		if _, err := time.Parse(time.RFC3339Nano, v); err != nil {
			return grpcx.InvalidArgument(key, "%q is not a time: write it as RFC 3339, e.g. 2026-11-27T09:30:00Z", v)
		}
	}
	if len(r.enum) > 0 && !slices.Contains(r.enum, v) {
		if _, err := strconv.ParseInt(v, 10, 32); err != nil { // an enum's number is the gateway's to check
			return grpcx.InvalidArgument(key, "%q is not one of %s", v, strings.Join(r.enum, ", "))
		}
	}
	return nil
}

// outOfRange is suffix when err is strconv's range error, else "".
func outOfRange(err error, suffix string) string {
	if errors.Is(err, strconv.ErrRange) {
		return suffix
	}
	return ""
}

// checkValues refuses a query value its parameter's type does not take,
// naming the parameter as the request wrote it: grpc-gateway's own refusal
// names the proto field and quotes Go's parser (parsing field "page_size":
// strconv.ParseInt: parsing "ten": invalid syntax).
func (rt *route) checkValues(q url.Values) error {
	for _, key := range sortedKeys(q) {
		rule, ok := rt.values[jsonFieldPath(key)]
		if !ok {
			continue
		}
		for _, v := range q[key] {
			if err := rule.check(key, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// routeSeg is one path segment of a template: a literal, or a parameter
// with an optional literal suffix (a custom verb, "{jobId}:watch"). A
// parameter whose OpenAPI pattern spans segments ("[^/]+/.+", a template's
// "{job_id=*/**}") takes the rest of the path, one segment or more, as
// grpc-gateway's router does (the service checks the value); it is a
// template's last segment.
type routeSeg struct {
	literal string // when param is ""
	param   string
	suffix  string
	rest    bool
}

// pathParam is a path parameter's name and its decoded value in a request.
type pathParam struct{ name, value string }

func (rt *route) knownQuery() string {
	if len(rt.query) == 0 {
		return " (it takes none)"
	}
	return " (known: " + strings.Join(sortedKeys(rt.query), ", ") + ")"
}

// routeTable is every operation of the gateway's OpenAPI document: the same
// document clients read, so what it lists is what the gateway accepts.
type routeTable []*route

// loadRoutes reads the operations of an OpenAPI v2 document.
func loadRoutes(spec []byte) (routeTable, error) {
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name    string   `json:"name"`
				In      string   `json:"in"`
				Type    string   `json:"type"`
				Pattern string   `json:"pattern"`
				Format  string   `json:"format"`
				Enum    []string `json:"enum"`
				Items   struct {
					Format string   `json:"format"`
					Enum   []string `json:"enum"`
				} `json:"items"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("httpgateway: openapi document: %w", err)
	}
	var t routeTable
	for _, path := range sortedKeys(doc.Paths) {
		for method, op := range doc.Paths[path] {
			rt := &route{method: strings.ToUpper(method), template: path, query: map[string]bool{}, repeated: map[string]bool{}, values: map[string]valueRule{}}
			spans := map[string]bool{} // path parameters whose pattern spans segments
			for _, p := range op.Parameters {
				spans[p.Name] = p.In == "path" && strings.Contains(p.Pattern, "/")
			}
			segs := strings.Split(strings.TrimPrefix(path, "/"), "/")
			for i, s := range segs {
				seg := routeSeg{literal: s}
				if rest, ok := strings.CutPrefix(s, "{"); ok {
					if name, suffix, ok := strings.Cut(rest, "}"); ok {
						seg = routeSeg{param: name, suffix: suffix}
						if spans[name] {
							if i != len(segs)-1 {
								return nil, fmt.Errorf("httpgateway: openapi document: %s %s: parameter %s spans segments and is not the last", method, path, name)
							}
							seg.rest = true
						}
					}
				}
				rt.segs = append(rt.segs, seg)
			}
			for _, p := range op.Parameters {
				if p.In == "query" {
					rt.query[p.Name] = true
					rt.repeated[p.Name] = p.Type == "array"
					rule := valueRule{format: p.Format, enum: p.Enum}
					if p.Type == "array" {
						rule = valueRule{format: p.Items.Format, enum: p.Items.Enum}
					}
					if rule.format != "" || len(rule.enum) > 0 {
						rt.values[p.Name] = rule
					}
				}
			}
			t = append(t, rt)
		}
	}
	return t, nil
}

// match finds the operation serving method and path, preferring the most
// literal template (a custom verb over a bare parameter), and returns its
// path parameters.
func (t routeTable) match(method, path string) (*route, []pathParam) {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var best *route
	var bestParams []pathParam
	bestScore := -1
	for _, rt := range t {
		if rt.method != method || len(rt.segs) > len(parts) ||
			(len(rt.segs) < len(parts) && !rt.segs[len(rt.segs)-1].rest) {
			continue
		}
		score, params, ok := 0, []pathParam(nil), true
		for i, s := range rt.segs {
			switch {
			case s.rest:
				value, cut := strings.CutSuffix(strings.Join(parts[i:], "/"), s.suffix)
				ok = cut && value != ""
				params = append(params, pathParam{s.param, value})
				score += len(s.suffix)
			case s.param == "":
				ok = parts[i] == s.literal
				score += len(s.literal)
			case strings.HasSuffix(parts[i], s.suffix) && len(parts[i]) > len(s.suffix):
				params = append(params, pathParam{s.param, strings.TrimSuffix(parts[i], s.suffix)})
				score += len(s.suffix)
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		if ok && score > bestScore {
			best, bestParams, bestScore = rt, params, score
		}
	}
	return best, bestParams
}

// methods returns the methods some operation of t serves path with, in
// the order of http's method constants.
func (t routeTable) methods(path string) []string {
	var out []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if rt, _ := t.match(m, path); rt != nil {
			out = append(out, m)
		}
	}
	return out
}

// specRoutes is the route table of the embedded OpenAPI document.
func specRoutes() (routeTable, error) { return loadRoutes(openapi.Spec) }
