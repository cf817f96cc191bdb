package httpgateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Development-mode headers: with no API keys configured the caller names its
// own tenant and project.
const (
	tenantHeader  = "X-Tenant-Id"
	projectHeader = "X-Project-Id"
	callerHeader  = "X-Caller-Id"
	apiKeyHeader  = "X-Api-Key"
	defaultTenant = "default"
)

// operatorTenant in a GATEWAY_API_KEYS entry (key=*[@caller]) makes an
// operator key: unscoped, for reads across tenants such as GET /v1/usage.
// In development mode (no keys) X-Tenant-Id: * asks for the same.
const operatorTenant = "*"

// principal is the authenticated scope of a request and who makes it.
type principal struct {
	// tenant is empty for an operator key: its calls carry no tenant, so
	// the services take the one the request names (and refuse a request
	// that names none), and GET /v1/usage shows every tenant.
	tenant  string
	project string
	// caller names the key's holder: the entry's @name, else "key-" and
	// the first 8 hex digits of the key's SHA-256 (stable, reveals nothing).
	caller string
}

type principalKey struct{}

func principalFrom(ctx context.Context) (principal, bool) {
	p, ok := ctx.Value(principalKey{}).(principal)
	return p, ok
}

// apiKey is one configured key. Only its SHA-256 is kept, so comparisons are
// constant time and independent of the presented key's length.
type apiKey struct {
	sum [sha256.Size]byte
	principal
}

// keyring authenticates requests. An empty keyring means development mode.
type keyring struct {
	keys []apiKey
}

// parseAPIKeys parses GATEWAY_API_KEYS: "key=tenant[:project][@caller]"
// entries separated by commas; tenant "*" makes an operator key. Errors name the entry by position, never by
// key.
func parseAPIKeys(spec string) (*keyring, error) {
	kr := &keyring{}
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
		case tenant == operatorTenant && project != "":
			return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: an operator key (tenant *) has no project", n)
		case tenant == operatorTenant:
			tenant = "" // unscoped: see principal
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
			if err := validCaller(caller); err != nil {
				return nil, fmt.Errorf("GATEWAY_API_KEYS: entry %d: caller %w", n, err)
			}
		} else {
			caller = fmt.Sprintf("key-%x", sum[:4])
		}
		kr.keys = append(kr.keys, apiKey{sum: sum, principal: principal{tenant: tenant, project: project, caller: caller}})
	}
	return kr, nil
}

// validCaller accepts a caller name: 1 to 128 printable ASCII characters
// without whitespace.
func validCaller(s string) error {
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

// open reports development mode: no keys configured.
func (k *keyring) open() bool { return len(k.keys) == 0 }

// lookup finds the key's principal. Every configured key is compared, in
// constant time, whatever matches, so timing does not reveal which prefix or
// which entry was close.
func (k *keyring) lookup(presented string) (principal, bool) {
	sum := sha256.Sum256([]byte(presented))
	var found principal
	match := 0
	for i := range k.keys {
		if subtle.ConstantTimeCompare(sum[:], k.keys[i].sum[:]) == 1 {
			found = k.keys[i].principal
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
	if vals, ok := r.Header[apiKeyHeader]; ok {
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

// statusWriter answers a request with an HTTP status and a gRPC status:
// writeStatus in the gateway's {code, message, details} shape, or another
// API's error shape on its routes.
type statusWriter func(w http.ResponseWriter, httpStatus int, st *status.Status)

// authenticate resolves the request's principal and stores it in the
// request context; without one it answers 401. The credentials are removed
// from the request so they never travel on to the services (grpc-gateway
// would forward Authorization as metadata) nor reach a log.
func (g *gateway) authenticate(next http.Handler) http.Handler {
	return g.authenticateAs(writeStatus, next)
}

// operatorOnly lets through a request of an operator key (or any in
// development mode, where every caller may claim to be one) and refuses
// a tenant's key with 403.
func (g *gateway) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := principalFrom(r.Context()); !g.keys.open() && p.tenant != "" {
			writeStatus(w, http.StatusForbidden, status.New(codes.PermissionDenied,
				"this holds every tenant's figures: it takes an operator key (GATEWAY_API_KEYS entry key=*), not a tenant's"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticateAs is authenticate answering failures with fail.
func (g *gateway) authenticateAs(fail statusWriter, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p principal
		if g.keys.open() {
			if g.crossSiteWrite(r) {
				fail(w, http.StatusForbidden, status.New(codes.PermissionDenied, "a browser sent this request from another site, and the gateway runs without API keys "+
					"(development mode), where any page a developer opens could write through it: set GATEWAY_API_KEYS, or allow that origin in GATEWAY_CORS_ORIGINS"))
				return
			}
			p = principal{tenant: strings.TrimSpace(r.Header.Get(tenantHeader)), project: strings.TrimSpace(r.Header.Get(projectHeader)),
				caller: strings.TrimSpace(r.Header.Get(callerHeader))}
			switch p.tenant {
			case "":
				p.tenant = defaultTenant
			case operatorTenant:
				// As an operator key: no tenant (every tenant's usage).
				p.tenant, p.project = "", ""
			}
			if err := grpcx.ValidScopeID(p.tenant); p.tenant != "" && err != nil {
				fail(w, http.StatusBadRequest, status.New(codes.InvalidArgument, tenantHeader+" "+err.Error()))
				return
			}
			if p.project != "" {
				if err := grpcx.ValidScopeID(p.project); err != nil {
					fail(w, http.StatusBadRequest, status.New(codes.InvalidArgument, projectHeader+" "+err.Error()))
					return
				}
			}
			if p.caller != "" {
				if err := validCaller(p.caller); err != nil {
					fail(w, http.StatusBadRequest, status.New(codes.InvalidArgument, callerHeader+" "+err.Error()))
					return
				}
			}
		} else {
			key, named := presentedKey(r)
			found, ok := g.keys.lookup(key)
			if key == "" || !ok {
				w.Header().Set("WWW-Authenticate", `Bearer realm="agentmesh"`)
				msg := "missing API key: send X-API-Key: <key> or Authorization: Bearer <key>"
				if key != "" || named {
					msg = "invalid API key"
				}
				fail(w, http.StatusUnauthorized, status.New(codes.Unauthenticated, msg))
				return
			}
			p = found
		}
		if ri := requestInfoFrom(r.Context()); ri != nil {
			ri.tenant = p.tenant
		}
		r = r.Clone(context.WithValue(r.Context(), principalKey{}, p))
		r.Header.Del("Authorization")
		r.Header.Del(apiKeyHeader)
		next.ServeHTTP(w, r)
	})
}

// scopeMetadata is the runtime.WithMetadata annotator: it forwards the
// authenticated scope and caller to the services. The incoming-header matcher refuses
// any client header that maps to these keys, so these are the only values.
func scopeMetadata(ctx context.Context, _ *http.Request) metadata.MD {
	p, ok := principalFrom(ctx)
	if !ok {
		return nil
	}
	md := metadata.MD{}
	if p.tenant != "" {
		md.Set(grpcx.TenantMetadataKey, p.tenant)
	}
	if p.project != "" {
		md.Set(grpcx.ProjectMetadataKey, p.project)
	}
	if p.caller != "" {
		md.Set(grpcx.CallerMetadataKey, p.caller)
	}
	return md
}

// crossSiteWrite reports a request that changes something, sent by a
// browser from a page of another site (Sec-Fetch-Site, which browsers set
// and pages cannot) and not from an origin GATEWAY_CORS_ORIGINS allows. A
// browser sends a form or a text/plain POST across sites without asking
// first, and in development mode nothing else identifies the caller.
func (g *gateway) crossSiteWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	if r.Header.Get("Sec-Fetch-Site") != "cross-site" {
		return false
	}
	origin := strings.TrimSuffix(r.Header.Get("Origin"), "/")
	for _, o := range g.cfg.CORSOrigins {
		if o == "*" || (origin != "" && strings.TrimSuffix(o, "/") == origin) {
			return false
		}
	}
	return true
}
