package httpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// knownDependencies are probed one by one when a service's health server
// cannot List its statuses.
var knownDependencies = []string{"mongo", "nats"}

// serviceHealth is one service's entry in /healthz.
type serviceHealth struct {
	// Status is the service's overall grpc.health.v1 status, or NOT_SERVING
	// when it could not be asked.
	Status string `json:"status"`
	// Dependencies maps each dependency the service reports to its status.
	Dependencies map[string]string `json:"dependencies"`
	// Error is the gRPC code of a failed health check.
	Error string `json:"error,omitempty"`
}

// healthReport is the body of /healthz.
type healthReport struct {
	Status   string                   `json:"status"`
	Services map[string]serviceHealth `json:"services"`
}

// checkHealth asks every service, concurrently, for its overall status and
// its dependencies' statuses.
func (g *gateway) checkHealth(ctx context.Context) healthReport {
	report := healthReport{Status: healthpb.HealthCheckResponse_SERVING.String(), Services: map[string]serviceHealth{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, b := range g.backends.list() {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, g.cfg.HealthTimeout)
			defer cancel()
			h := g.checkService(ctx, b)
			mu.Lock()
			defer mu.Unlock()
			report.Services[b.name] = h
			if h.Status != healthpb.HealthCheckResponse_SERVING.String() {
				report.Status = healthpb.HealthCheckResponse_NOT_SERVING.String()
			}
		})
	}
	wg.Wait()
	return report
}

func (g *gateway) checkService(ctx context.Context, b backend) serviceHealth {
	out := serviceHealth{Dependencies: map[string]string{}}
	client := healthpb.NewHealthClient(b.conn)
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		// The code only: the message may hold internal addresses, and this
		// endpoint is unauthenticated.
		st := status.Convert(err)
		g.log.WarnContext(ctx, "health check failed", "backend", b.name, "code", st.Code().String(), "error", st.Message())
		out.Status = healthpb.HealthCheckResponse_NOT_SERVING.String()
		out.Error = st.Code().String()
		return out
	}
	out.Status = resp.GetStatus().String()

	list, err := client.List(ctx, &healthpb.HealthListRequest{})
	switch {
	case err == nil:
		for name, st := range list.GetStatuses() {
			if dep, ok := strings.CutPrefix(name, grpcx.DependencyPrefix); ok {
				out.Dependencies[dep] = st.GetStatus().String()
			}
		}
	case status.Code(err) == codes.Unimplemented:
		for _, dep := range knownDependencies {
			r, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: grpcx.DependencyPrefix + dep})
			if err == nil {
				out.Dependencies[dep] = r.GetStatus().String()
			}
		}
	}
	return out
}

// serveHealth answers /healthz: 200 when every service is SERVING, else
// 503; the body says which service and dependency is not.
func (g *gateway) serveHealth(w http.ResponseWriter, r *http.Request) {
	report := g.checkHealth(r.Context())
	code := http.StatusOK
	if report.Status != healthpb.HealthCheckResponse_SERVING.String() {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, report)
}

// serveReady answers /readyz, the readiness probe: 200 when every service
// of GATEWAY_READY_SERVICES is SERVING, else 503, with /healthz's body. A
// service reports NOT_SERVING while its MongoDB or NATS is down, so an
// outage takes the gateway out of rotation with them; /livez stays 200.
func (g *gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	report := g.checkHealth(r.Context())
	code := http.StatusOK
	for _, name := range g.cfg.ReadyServices {
		if report.Services[name].Status != healthpb.HealthCheckResponse_SERVING.String() {
			code = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, code, report)
}

// checkReadyServices fails for a name in GATEWAY_READY_SERVICES that is no
// backend's, which would otherwise keep the gateway unready for ever.
func checkReadyServices(names []string, backends Backends) error {
	known := map[string]bool{}
	var list []string
	for _, b := range backends.list() {
		known[b.name] = true
		list = append(list, b.name)
	}
	for _, n := range names {
		if !known[n] {
			return fmt.Errorf("httpgateway: GATEWAY_READY_SERVICES: unknown service %q (known: %s)", n, strings.Join(list, ", "))
		}
	}
	return nil
}

// serveLive answers /livez, the liveness probe: the process is up and
// serving HTTP, whatever its backends say.
func serveLive(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "SERVING"})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}
