package httpgateway

import (
	"context"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/frontdoor"
)

// statusWriter answers a request with an HTTP status and a gRPC status:
// writeStatus in the gateway's {code, message, details} shape, or another
// API's error shape on its routes.
type statusWriter = frontdoor.StatusWriter

// principalFrom returns the principal authentication stored in ctx.
func principalFrom(ctx context.Context) (frontdoor.Principal, bool) {
	return frontdoor.PrincipalFrom(ctx)
}

// authenticate resolves the request's principal (frontdoor.Door) and
// stores it in the request context; without one it answers 401.
func (g *gateway) authenticate(next http.Handler) http.Handler {
	return g.authenticateAs(writeStatus, next)
}

// operatorOnly lets through a request of an operator key (or any in
// development mode, where every caller may claim to be one) and refuses
// a tenant's key with 403.
func (g *gateway) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, _ := principalFrom(r.Context()); !g.door.Keys.Open() && p.Tenant != "" {
			writeStatus(w, http.StatusForbidden, status.New(codes.PermissionDenied,
				"this holds every tenant's figures: it takes an operator key (GATEWAY_API_KEYS entry key=*), not a tenant's"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// authenticateAs is authenticate answering failures with fail.
func (g *gateway) authenticateAs(fail statusWriter, next http.Handler) http.Handler {
	return g.door.Authenticate(fail, next)
}

// scopeMetadata is the runtime.WithMetadata annotator: it forwards the
// authenticated scope and caller to the services. The incoming-header matcher refuses
// any client header that maps to these keys, so these are the only values.
func scopeMetadata(ctx context.Context, _ *http.Request) metadata.MD {
	p, ok := principalFrom(ctx)
	if !ok {
		return nil
	}
	return p.Metadata()
}
