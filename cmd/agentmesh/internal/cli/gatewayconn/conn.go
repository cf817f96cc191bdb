// Package gatewayconn lets the mesh's generated gRPC clients talk to the
// gateway's REST and SSE API instead of to the services: Conn implements
// grpc.ClientConnInterface, mapping each method to its HTTP route as the
// gateway's OpenAPI document (generated from gateway/api_config.yaml) states
// it, unary calls to JSON requests and server streams to Server-Sent Events.
// So the CLI is written once against the gRPC clients and works against an
// install that exposes only the gateway, and a route the gateway changes is
// picked up with the regenerated document rather than edited here.
package gatewayconn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	_ "google.golang.org/genproto/googleapis/rpc/errdetails" // the details the gateway's errors carry
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Options configures a Conn.
type Options struct {
	// URL is the gateway's base URL, e.g. http://localhost:8080. Required.
	URL string
	// APIKey is sent as a bearer token when set.
	APIKey string
	// Tenant and Project are sent as X-Tenant-Id and X-Project-Id, which a
	// gateway without API keys (development mode) takes as the scope; a
	// gateway with keys takes the scope from the key.
	Tenant, Project string
	// SendTenant sends Tenant as the requests' scope.tenantId also with an
	// API key: an operator key's requests name the tenant they act for
	// (another key is refused one other than its own).
	SendTenant bool
	// Hint is appended to "cannot reach the gateway at URL" errors, e.g.
	// "(set AGENTMESH_URL)".
	Hint string
	// Client sends the requests; nil means DefaultClient: no timeout on
	// the whole exchange (streams last as long as the work they follow),
	// but on each step before the answer starts.
	Client *http.Client
	// Spec is the gateway's OpenAPI v2 document (gateway/openapi.Spec).
	Spec []byte
}

// Conn is a grpc.ClientConnInterface over the gateway. Safe for concurrent
// use; it holds no connection of its own beyond its HTTP client's.
type Conn struct {
	opts   Options
	base   *url.URL
	routes map[string]route // by "Service/Method"
}

var _ grpc.ClientConnInterface = (*Conn)(nil)

// route is one operation of the OpenAPI document.
type route struct {
	method string   // GET, POST, DELETE
	path   string   // template, e.g. /v1/jobs/{jobId}:watch
	params []string // path parameters, JSON field names
	// multi are the path parameters whose values span segments (the
	// pattern of GET /v1/sql/jobs/{jobId} is "[^/]+/.+"): their slashes
	// stay slashes.
	multi map[string]bool
	body  bool // the request travels as the JSON body
}

var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// New reads the routes from opts.Spec.
func New(opts Options) (*Conn, error) {
	base, err := url.Parse(strings.TrimRight(opts.URL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("gateway URL %q: want http(s)://host[:port]", opts.URL)
	}
	if strings.HasSuffix(base.Path, "/v1") {
		// Every route begins /v1: /v1/v1/models answered 404, read as
		// "no such thing".
		return nil, fmt.Errorf("gateway URL %q: give the gateway's root, without /v1 (%s)", shown(base), shown(&url.URL{Scheme: base.Scheme, Host: base.Host, Path: strings.TrimSuffix(base.Path, "/v1")}))
	}
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
			Parameters  []struct {
				Name    string `json:"name"`
				In      string `json:"in"`
				Pattern string `json:"pattern"`
			} `json:"parameters"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(opts.Spec, &doc); err != nil {
		return nil, fmt.Errorf("gateway OpenAPI document: %w", err)
	}
	c := &Conn{opts: opts, base: base, routes: map[string]route{}}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			// protoc-gen-openapiv2 names an operation Service_Method and an
			// additional binding Service_Method2. Where a method has both,
			// the versioned /v1/ route is the mesh's own shape; the other
			// repeats the original classification agent's (seedstatus.go).
			svc, m, ok := strings.Cut(op.OperationID, "_")
			if !ok {
				continue
			}
			m = strings.TrimRight(m, "0123456789")
			if prev, seen := c.routes[svc+"/"+m]; seen && strings.HasPrefix(prev.path, "/v1/") {
				continue
			}
			r := route{method: strings.ToUpper(method), path: path}
			for _, p := range pathParam.FindAllStringSubmatch(path, -1) {
				r.params = append(r.params, p[1])
			}
			for _, p := range op.Parameters {
				r.body = r.body || p.In == "body"
				if p.In == "path" && strings.Contains(p.Pattern, "/") {
					if r.multi == nil {
						r.multi = map[string]bool{}
					}
					r.multi[p.Name] = true
				}
			}
			c.routes[svc+"/"+m] = r
		}
	}
	if len(c.routes) == 0 {
		return nil, errors.New("gateway OpenAPI document: no operations")
	}
	return c, nil
}

// URL is the gateway's base URL.
func (c *Conn) URL() string { return c.base.String() }

// routeOf finds the route of a gRPC method name such as
// /agentmesh.orchestrator.v1.JobService/GetJob.
func (c *Conn) routeOf(fullMethod string) (route, error) {
	svc, m, _ := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/")
	if i := strings.LastIndexByte(svc, '.'); i >= 0 {
		svc = svc[i+1:]
	}
	r, ok := c.routes[svc+"/"+m]
	if !ok {
		return route{}, status.Errorf(codes.Unimplemented, "the gateway has no REST route for %s; use direct gRPC (--grpc)", fullMethod)
	}
	return r, nil
}

// request builds the HTTP request of one call.
func (c *Conn) request(ctx context.Context, r route, in any, accept string) (*http.Request, error) {
	msg, ok := in.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "request %T is not a proto message", in)
	}
	raw, err := protojson.Marshal(msg)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "encoding the request: %v", err)
	}
	fields := map[string]any{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil {
		return nil, status.Errorf(codes.Internal, "encoding the request: %v", err)
	}
	// The gateway's authentication decides the tenant: naming one here
	// would only be refused when it differs from the key's, unless the
	// user named it for an operator key.
	if s, ok := fields["scope"].(map[string]any); ok && !(c.opts.SendTenant && c.opts.APIKey != "") {
		delete(s, "tenantId")
		if len(s) == 0 {
			delete(fields, "scope")
		}
	}
	path, rawPath := r.path, r.path
	for _, p := range r.params {
		v, _ := fields[p].(string)
		if v == "" {
			return nil, status.Errorf(codes.InvalidArgument, "%s is required", p)
		}
		escaped := url.PathEscape(v)
		if r.multi[p] {
			segs := strings.Split(v, "/")
			for i := range segs {
				segs[i] = url.PathEscape(segs[i])
			}
			escaped = strings.Join(segs, "/")
		}
		path = strings.Replace(path, "{"+p+"}", v, 1)
		rawPath = strings.Replace(rawPath, "{"+p+"}", escaped, 1)
		delete(fields, p)
	}
	u := *c.base
	// Path holds the values as they are, RawPath as they travel: a value's
	// escapes (%2F for a slash inside one segment) are not escaped again.
	u.RawPath = u.EscapedPath() + rawPath
	u.Path += path
	var body io.Reader
	if r.body {
		b, err := json.Marshal(fields)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "encoding the request: %v", err)
		}
		body = bytes.NewReader(b)
	} else {
		q := url.Values{}
		flatten("", fields, q)
		u.RawQuery = q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	c.authorize(req)
	// Outgoing gRPC metadata travels as headers, as grpc-gateway expects.
	if md, ok := metadata.FromOutgoingContext(ctx); ok {
		for k, vs := range md {
			if strings.HasPrefix(k, "x-agentmesh-") {
				continue // the scope: decided by the gateway, see above
			}
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
	}
	return req, nil
}

// authorize adds the credentials: the API key, or without one the
// development-mode scope headers.
func (c *Conn) authorize(req *http.Request) {
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
		return
	}
	if c.opts.Tenant != "" {
		req.Header.Set("X-Tenant-Id", c.opts.Tenant)
	}
	if c.opts.Project != "" {
		req.Header.Set("X-Project-Id", c.opts.Project)
	}
}

// flatten writes a JSON object as grpc-gateway's query parameters:
// nested fields dotted (scope.projectId), repeated fields repeated.
func flatten(prefix string, v any, q url.Values) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if prefix != "" {
				k = prefix + "." + k
			}
			flatten(k, e, q)
		}
	case []any:
		for _, e := range x {
			flatten(prefix, e, q)
		}
	default:
		q.Add(prefix, fmt.Sprint(x))
	}
}

// do sends req and returns the response when its status is 2xx; otherwise
// the error the gateway's {code, message, details} body names.
func (c *Conn) do(req *http.Request) (*http.Response, error) {
	resp, err := c.client().Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, status.FromContextError(ctxErr).Err()
		}
		return nil, c.unreachable(err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, httpError(resp)
}

func (c *Conn) client() *http.Client {
	if c.opts.Client != nil {
		return c.opts.Client
	}
	return DefaultClient
}

// DefaultClient bounds each step before an answer starts: a gateway that
// accepts a connection and never answers (a stalled process, a proxy
// holding the request) held the CLI until it was interrupted. Connecting
// takes at most 10 s, TLS 10 s, and the answer's headers ResponseTimeout
// once the request is sent (a stream's headers come at once; a unary
// answer may wait for the work it asked for, a query or an ingest, which
// the services bound themselves). The body of an answer, a stream's above
// all, is not bounded.
var DefaultClient = newClient(ResponseTimeout)

func newClient(responseTimeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: responseTimeout,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}}
}

// ResponseTimeout is how long DefaultClient waits for an answer to start.
const ResponseTimeout = 3 * time.Minute

// unreachable names the address and the variable to set.
func (c *Conn) unreachable(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	detail := err.Error()
	if errors.As(err, &ne) {
		detail = ne.Error()
	}
	msg := fmt.Sprintf("cannot reach the gateway at %s", shown(c.base))
	if c.opts.Hint != "" {
		msg += " " + c.opts.Hint
	}
	return status.Errorf(codes.Unavailable, "%s: %s", msg, detail)
}

// shown is u as a message may show it: a password it holds as "xxxxx",
// and its query's values (where a key may travel) as "…".
func shown(u *url.URL) string {
	c := *u
	if c.RawQuery != "" {
		q := c.Query()
		for k := range q {
			q[k] = []string{"…"}
		}
		c.RawQuery = q.Encode()
	}
	return c.Redacted()
}

// httpError turns a failed response into a gRPC status: the body's code
// when it is the gateway's error shape (with its details, the reason a
// client branches on among them), else one derived from the HTTP status (a
// proxy in front of the gateway answers in its own words).
func httpError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var st spb.Status
	if protojson.Unmarshal(body, &st) == nil && st.GetCode() != 0 {
		return status.ErrorProto(&st)
	}
	var e struct {
		Code    *int32 `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil && e.Code != nil && *e.Code != 0 {
		return status.Error(codes.Code(*e.Code), e.Message)
	}
	text := strings.Join(strings.Fields(utf8x.Valid(string(body))), " ") // a proxy's page, in any charset, on one line
	if len(text) > 200 {
		text = utf8x.Prefix(text, 200) + "…"
	}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		// The gateway answers these in its own shape: this is another
		// server (the URL is not the gateway's), not a missing object.
		return status.Errorf(codes.Unavailable, "HTTP %d from %s, which is not the gateway's answer (is the URL the gateway's?): %s", resp.StatusCode, shown(resp.Request.URL), text)
	}
	return status.Errorf(codeOfHTTP(resp.StatusCode), "HTTP %d from %s: %s", resp.StatusCode, shown(resp.Request.URL), text)
}

// codeOfHTTP is the inverse of grpc-gateway's HTTPStatusFromCode, for
// answers that do not carry a gRPC code.
func codeOfHTTP(s int) codes.Code {
	switch s {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusNotImplemented:
		return codes.Unimplemented
	case http.StatusBadGateway, http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	}
	return codes.Unknown
}

// unmarshal reads a JSON response into a message, ignoring fields this
// binary does not know (a newer gateway).
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// Invoke performs a unary call as one REST request.
func (c *Conn) Invoke(ctx context.Context, method string, args, reply any, _ ...grpc.CallOption) error {
	r, err := c.routeOf(method)
	if err != nil {
		return err
	}
	req, err := c.request(ctx, r, args, "application/json")
	if err != nil {
		return err
	}
	out, ok := reply.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "reply %T is not a proto message", reply)
	}
	return c.roundTrip(req, out)
}

// roundTrip sends req and reads its JSON answer into out (an empty body
// leaves out as it is).
func (c *Conn) roundTrip(req *http.Request, out proto.Message) error {
	resp, err := c.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return c.unreachable(err)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	if err := unmarshal.Unmarshal(body, out); err != nil {
		return status.Errorf(codes.Internal, "decoding the gateway's answer: %v", err)
	}
	return nil
}

// NewStream starts a server-streaming call; the request goes out with the
// first RecvMsg, once SendMsg has given it.
func (c *Conn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	if desc.ClientStreams {
		return nil, status.Errorf(codes.Unimplemented, "%s streams from the client; the gateway serves only server streams", method)
	}
	r, err := c.routeOf(method)
	if err != nil {
		return nil, err
	}
	return &stream{conn: c, ctx: ctx, route: r}, nil
}

// GetJSON reads a plain JSON endpoint of the gateway (such as /healthz)
// into out and returns the HTTP status; a body that is not JSON is an
// error naming the status.
func (c *Conn) GetJSON(ctx context.Context, path string, out any) (int, error) {
	u := *c.base
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "%v", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.opts.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.APIKey)
	}
	resp, err := c.client().Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return 0, status.FromContextError(ctxErr).Err()
		}
		return 0, c.unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, c.unreachable(err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return resp.StatusCode, status.Errorf(codeOfHTTP(resp.StatusCode), "HTTP %d from %s: not the gateway's JSON: %s", resp.StatusCode, shown(&u), bytes.TrimSpace(body[:min(len(body), 200)]))
	}
	return resp.StatusCode, nil
}
