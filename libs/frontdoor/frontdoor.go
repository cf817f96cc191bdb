// Package frontdoor is what the mesh's HTTP entrances do around a handler:
// a request id, span, duration metric and log line for every request
// (Observer), API key authentication (GATEWAY_API_KEYS, or the open
// development mode, where headers name the tenant) and reading the request
// body whole within a size and a time limit. The REST gateway and the model
// gateway's OpenAI-compatible listener both use it, so a key means the same
// at either door.
package frontdoor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Development-mode headers: with no API keys configured the caller names its
// own tenant and project.
const (
	TenantHeader  = "X-Tenant-Id"
	ProjectHeader = "X-Project-Id"
	CallerHeader  = "X-Caller-Id"
	APIKeyHeader  = "X-Api-Key"
	// DefaultTenant is the tenant of a development-mode request that
	// names none.
	DefaultTenant = "default"
)

// OperatorTenant in a GATEWAY_API_KEYS entry (key=*[@caller]) makes an
// operator key: unscoped, for reads across tenants such as GET /v1/usage.
// In development mode (no keys) X-Tenant-Id: * asks for the same.
const OperatorTenant = "*"

// Principal is the authenticated scope of a request and who makes it.
type Principal struct {
	// Tenant is empty for an operator key: its calls carry no tenant, so
	// the services take the one the request names (and refuse a request
	// that names none), and usage reports show every tenant.
	Tenant  string
	Project string
	// Caller names the key's holder: the entry's @name, else "key-" and
	// the first 8 hex digits of the key's SHA-256 (stable, reveals nothing).
	Caller string
}

type principalKey struct{}

// PrincipalFrom returns the principal Authenticate stored in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

type credentialKey struct{}

// Credential is the API key a request authenticated with (Authenticate
// keeps it in the context, out of the request's headers): for a replica
// that asks its peers on the caller's behalf, presenting the same key as
// APIKeyHeader. Empty in development mode, where the request's own
// X-Tenant-Id, X-Project-Id and X-Caller-Id headers name the caller.
func Credential(ctx context.Context) string {
	k, _ := ctx.Value(credentialKey{}).(string)
	return k
}

// Metadata is the gRPC metadata that forwards p to the services: its
// tenant, project and caller, each when set.
func (p Principal) Metadata() metadata.MD {
	md := metadata.MD{}
	if p.Tenant != "" {
		md.Set(grpcx.TenantMetadataKey, p.Tenant)
	}
	if p.Project != "" {
		md.Set(grpcx.ProjectMetadataKey, p.Project)
	}
	if p.Caller != "" {
		md.Set(grpcx.CallerMetadataKey, p.Caller)
	}
	return md
}

// apiKey is one configured key. Only its SHA-256 is kept, so comparisons are
// constant time and independent of the presented key's length.
type apiKey struct {
	sum [sha256.Size]byte
	Principal
}

// Keyring authenticates requests. An empty Keyring means development mode.
type Keyring struct {
	keys []apiKey
}

// ParseKeys parses GATEWAY_API_KEYS: "key=tenant[:project][@caller]"
// entries separated by commas; tenant "*" makes an operator key. Errors
// name the entry by position, never by key.
func ParseKeys(spec string) (*Keyring, error) {
	kr := &Keyring{}
	seen := map[[sha256.Size]byte]bool{}
	n := 0
	for _, entry := range strings.Split(spec, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		n++
		key, scope, ok := strings.Cut(entry, "=")
		key, scope = strings.TrimSpace(key), strings.TrimSpace(scope)
		if !ok || key == "" || scope == "" {
			return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: want key=tenant[:project][@caller]", n)
		}
		scope, caller, named := strings.Cut(scope, "@")
		tenant, project, _ := strings.Cut(scope, ":")
		tenant, project = strings.TrimSpace(tenant), strings.TrimSpace(project)
		switch {
		case tenant == OperatorTenant && project != "":
			return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: an operator key (tenant *) has no project", n)
		case tenant == OperatorTenant:
			tenant = "" // unscoped: see Principal
		default:
			if err := grpcx.ValidScopeID(tenant); err != nil {
				return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: tenant %w", n, err)
			}
		}
		if project != "" {
			if err := grpcx.ValidScopeID(project); err != nil {
				return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: project %w", n, err)
			}
		}
		sum := sha256.Sum256([]byte(key))
		if seen[sum] {
			return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: duplicate key", n)
		}
		seen[sum] = true
		if caller = strings.TrimSpace(caller); named {
			if err := ValidCaller(caller); err != nil {
				return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: caller %w", n, err)
			}
		} else {
			caller = fmt.Sprintf("key-%x", sum[:4])
		}
		kr.keys = append(kr.keys, apiKey{sum: sum, Principal: Principal{Tenant: tenant, Project: project, Caller: caller}})
	}
	return kr, nil
}

// ValidCaller accepts a caller name: 1 to 128 printable ASCII characters
// without whitespace.
func ValidCaller(s string) error {
	if s == "" || len(s) > 128 {
		return fmt.Errorf("must be 1 to 128 characters")
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c > '~' {
			return fmt.Errorf("must be printable ASCII without whitespace")
		}
	}
	return nil
}

// Open reports development mode: no keys configured.
func (k *Keyring) Open() bool { return len(k.keys) == 0 }

// lookup finds the key's principal. Every configured key is compared, in
// constant time, whatever matches, so timing does not reveal which prefix or
// which entry was close.
func (k *Keyring) lookup(presented string) (Principal, bool) {
	sum := sha256.Sum256([]byte(presented))
	var found Principal
	match := 0
	for i := range k.keys {
		if subtle.ConstantTimeCompare(sum[:], k.keys[i].sum[:]) == 1 {
			found = k.keys[i].Principal
			match = 1
		}
	}
	return found, match == 1
}

// presentedKey returns the gateway key a request presents. A request with
// an X-API-Key header presents that, and its Authorization header is not a
// gateway credential: clients of the original classification agent send
// their model provider's key as "Authorization: Bearer <key>", and the
// gateway key beside it. Only without X-API-Key is the key the bearer token
// of Authorization. One credential decides, so a valid key in one header
// never rescues an invalid one in the other. X-API-Key given more than once
// presents no key (named is still true).
func presentedKey(r *http.Request) (key string, named bool) {
	if vals, ok := r.Header[APIKeyHeader]; ok {
		if len(vals) != 1 {
			return "", true
		}
		return strings.TrimSpace(vals[0]), true
	}
	if auth := r.Header.Get("Authorization"); auth != "" {
		if scheme, token, ok := strings.Cut(auth, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token), false
		}
	}
	return "", false
}

// StatusWriter answers a request with an HTTP status and a gRPC status, in
// the error shape of the API the route belongs to.
type StatusWriter func(w http.ResponseWriter, httpStatus int, st *status.Status)

// Door authenticates requests with a Keyring.
type Door struct {
	// Keys are the configured API keys; empty means development mode.
	Keys *Keyring
	// CORSOrigins are the browser origins allowed to write in development
	// mode ("*" = any).
	CORSOrigins []string
	// Limit, if set, holds each caller to its rate (429 with Retry-After).
	Limit *RateLimit
}

// Authenticate resolves the request's principal, stores it in the request
// context and calls next; without one it answers with fail (401 for a
// missing or invalid key, 400 for a development-mode header that is not a
// valid id, 403 for a browser's cross-site write in development mode, 429
// past the caller's rate limit, with Retry-After). The
// credentials are removed from the request so they never travel on to the
// services (grpc-gateway would forward Authorization as metadata) nor reach
// a log.
func (d *Door) Authenticate(fail StatusWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, code, st := d.principal(r)
		if st != nil {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentmesh"`)
			}
			fail(w, code, st)
			return
		}
		if wait := d.Limit.take(p); wait > 0 {
			SetRetryAfter(w.Header(), wait)
			per := "API key"
			if d.Keys.Open() {
				per = "tenant, project and caller"
			}
			fail(w, http.StatusTooManyRequests, status.Newf(codes.ResourceExhausted,
				"rate limit: at most %g requests a second per %s (bursts of %d); retry after %s", d.Limit.Rate, per, d.Limit.Burst,
				wait.Round(time.Millisecond)))
			return
		}
		noteTenant(r.Context(), p.Tenant)
		ctx := context.WithValue(r.Context(), principalKey{}, p)
		if !d.Keys.Open() {
			key, _ := presentedKey(r)
			ctx = context.WithValue(ctx, credentialKey{}, key)
		}
		r = r.Clone(ctx)
		r.Header.Del("Authorization")
		r.Header.Del(APIKeyHeader)
		next.ServeHTTP(w, r)
	})
}

// principal is the request's principal, or the HTTP status and the status
// to refuse it with.
func (d *Door) principal(r *http.Request) (Principal, int, *status.Status) {
	if !d.Keys.Open() {
		key, named := presentedKey(r)
		found, ok := d.Keys.lookup(key)
		if key == "" || !ok {
			msg := "missing API key: send X-API-Key: <key> or Authorization: Bearer <key>"
			if key != "" || named {
				msg = "invalid API key"
			}
			return Principal{}, http.StatusUnauthorized, status.New(codes.Unauthenticated, msg)
		}
		return found, 0, nil
	}
	if d.crossSiteWrite(r) {
		return Principal{}, http.StatusForbidden, status.New(codes.PermissionDenied, "a browser sent this request from another site, and the gateway runs without API keys "+
			"(development mode), where any page a developer opens could write through it: set GATEWAY_API_KEYS, or allow that origin in GATEWAY_CORS_ORIGINS")
	}
	if host, ok := d.rebindable(r); ok {
		return Principal{}, http.StatusForbidden, status.New(codes.PermissionDenied, "a browser reached the gateway by the name "+host+", and the gateway runs without API keys "+
			"(development mode), where a page of any site could point its own name at this machine (DNS rebinding) and read and write through it: "+
			"use localhost or an IP address, set GATEWAY_API_KEYS, or allow that origin in GATEWAY_CORS_ORIGINS")
	}
	p := Principal{Tenant: strings.TrimSpace(r.Header.Get(TenantHeader)), Project: strings.TrimSpace(r.Header.Get(ProjectHeader)),
		Caller: strings.TrimSpace(r.Header.Get(CallerHeader))}
	switch p.Tenant {
	case "":
		p.Tenant = DefaultTenant
	case OperatorTenant:
		// As an operator key: no tenant (every tenant's usage).
		p.Tenant, p.Project = "", ""
	}
	if err := grpcx.ValidScopeID(p.Tenant); p.Tenant != "" && err != nil {
		return Principal{}, http.StatusBadRequest, status.New(codes.InvalidArgument, TenantHeader+" "+err.Error())
	}
	if p.Project != "" {
		if err := grpcx.ValidScopeID(p.Project); err != nil {
			return Principal{}, http.StatusBadRequest, status.New(codes.InvalidArgument, ProjectHeader+" "+err.Error())
		}
	}
	if p.Caller != "" {
		if err := ValidCaller(p.Caller); err != nil {
			return Principal{}, http.StatusBadRequest, status.New(codes.InvalidArgument, CallerHeader+" "+err.Error())
		}
	}
	return p, 0, nil
}

// crossSiteWrite reports a request that changes something, sent by a
// browser from a page of another site (Sec-Fetch-Site, which browsers set
// and pages cannot) and not from an origin CORSOrigins allows. A browser
// sends a form or a text/plain POST across sites without asking first, and
// in development mode nothing else identifies the caller. A browser that
// predates Sec-Fetch-Site (Safari before 16.4, Firefox before 90) still
// sends Origin with such a POST: a page whose host is not the one the
// request went to is another site (another port of the same host is the
// same site, as Sec-Fetch-Site has it), and so is the opaque origin "null"
// of a sandboxed frame or a local file.
func (d *Door) crossSiteWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	origin := strings.TrimSuffix(r.Header.Get("Origin"), "/")
	switch site := r.Header.Get("Sec-Fetch-Site"); {
	case site == "cross-site":
	case site != "" || origin == "":
		return false
	case origin != "null":
		u, err := url.Parse(origin)
		if err == nil && u.Host != "" && strings.EqualFold(u.Hostname(), requestHost(r)) {
			return false
		}
	}
	for _, o := range d.CORSOrigins {
		if o == "*" || (origin != "" && strings.TrimSuffix(o, "/") == origin) {
			return false
		}
	}
	return true
}

// rebindable reports a browser's request (Sec-Fetch-Site or Origin, which
// browsers set) that reached the gateway by a host name, other than
// localhost, that no origin in CORSOrigins names, and returns that name.
// A page's own origin may resolve to this machine (DNS rebinding): to the
// browser its requests are then same-origin, reads included, and only the
// name they were sent to tells them apart. An IP address, localhost and
// *.localhost cannot be a page's name; clients that are not browsers send
// neither header.
func (d *Door) rebindable(r *http.Request) (string, bool) {
	if r.Header.Get("Sec-Fetch-Site") == "" && r.Header.Get("Origin") == "" {
		return "", false
	}
	host := strings.ToLower(strings.TrimSuffix(requestHost(r), "."))
	if net.ParseIP(host) != nil || host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "", false
	}
	for _, o := range d.CORSOrigins {
		if o == "*" {
			return "", false
		}
		if u, err := url.Parse(strings.TrimSuffix(o, "/")); err == nil && strings.EqualFold(u.Hostname(), host) {
			return "", false
		}
	}
	return host, true
}

// requestHost is the host r was sent to, without its port (and an IPv6
// address without its brackets), as url.URL.Hostname reads an Origin's.
func requestHost(r *http.Request) string { return (&url.URL{Host: r.Host}).Hostname() }

// BodyLimits bound how a request body is read.
type BodyLimits struct {
	// MaxBytes is the largest body taken; a larger one is 413.
	MaxBytes int64
	// Timeout is the longest the body may take to arrive; a slower client
	// gets 408 and its connection closed.
	Timeout time.Duration
}

// ReadBody reads the request body whole within limits before next sees
// the request (which then reads it from memory), answering a body too
// large, too slow or broken with fail.
func ReadBody(limits BodyLimits, fail StatusWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > limits.MaxBytes {
			w.Header().Set("Connection", "close")
			fail(w, http.StatusRequestEntityTooLarge, status.Newf(codes.InvalidArgument, "request body is larger than %d bytes", limits.MaxBytes))
			return
		}
		rc := http.NewResponseController(w)
		deadlineSet := rc.SetReadDeadline(time.Now().Add(limits.Timeout)) == nil
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limits.MaxBytes))
		if err != nil {
			// The connection's read side is unusable now: close it. The
			// deadline stays, so the server's own read of what is left of
			// the body cannot block either.
			w.Header().Set("Connection", "close")
			var tooLarge *http.MaxBytesError
			var ne net.Error
			switch {
			case errors.As(err, &tooLarge):
				fail(w, http.StatusRequestEntityTooLarge, status.Newf(codes.InvalidArgument, "request body is larger than %d bytes", limits.MaxBytes))
			case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
				fail(w, http.StatusRequestTimeout, status.Newf(codes.DeadlineExceeded, "request body not received within %s", limits.Timeout))
			default:
				fail(w, http.StatusBadRequest, status.Newf(codes.InvalidArgument, "reading the request body: %v", err))
			}
			return
		}
		if deadlineSet {
			_ = rc.SetReadDeadline(time.Time{})
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}
