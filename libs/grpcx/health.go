package grpcx

import (
	"context"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// DependencyPrefix prefixes the health service names under which each
// dependency's own status is published, e.g. "dependency/mongo".
const DependencyPrefix = "dependency/"

// LivenessService is the health service name that is SERVING for as long as
// the server serves, whatever its dependencies say. Kubernetes liveness
// probes ask for it: a pod whose MongoDB or NATS is down must leave the
// load balancer (readiness, "") but not be restarted, since a restart
// cannot bring a dependency back and only adds crash-loop back-off to the
// recovery.
const LivenessService = "liveness"

// Health publishes grpc.health.v1 statuses. Every registered gRPC service,
// and the server as a whole (""), is SERVING only while every dependency is
// healthy; each dependency also has its own entry "dependency/<name>", so a
// probe can tell which one is down; LivenessService is SERVING until
// shutdown. Safe for concurrent use.
type Health struct {
	hs *health.Server

	mu       sync.Mutex // guards the fields below
	services []string
	deps     map[string]error
	stopped  bool
}

func newHealth(hs *health.Server) *Health {
	return &Health{hs: hs, deps: map[string]error{}}
}

// Set records a dependency's state: err == nil means healthy.
func (h *Health) Set(dependency string, err error) {
	h.mu.Lock()
	h.deps[dependency] = err
	h.mu.Unlock()
	h.refresh()
}

// Dependencies returns each dependency's last error (nil = healthy).
func (h *Health) Dependencies() map[string]error {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]error, len(h.deps))
	for k, v := range h.deps {
		out[k] = v
	}
	return out
}

// Watch checks a dependency every interval until ctx is done, recording each
// result with Set. The first check runs at once.
func (h *Health) Watch(ctx context.Context, dependency string, interval time.Duration, check func(context.Context) error) {
	run := func() {
		cctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		err := check(cctx)
		if ctx.Err() == nil {
			h.Set(dependency, err)
		}
	}
	run()
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				run()
			}
		}
	}()
}

func (h *Health) registerService(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if name == healthpb.Health_ServiceDesc.ServiceName {
		return
	}
	for _, s := range h.services {
		if s == name {
			return
		}
	}
	h.services = append(h.services, name)
	sort.Strings(h.services)
}

func (h *Health) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	overall := healthpb.HealthCheckResponse_SERVING
	for name, err := range h.deps {
		st := healthpb.HealthCheckResponse_SERVING
		if err != nil {
			st = healthpb.HealthCheckResponse_NOT_SERVING
			overall = st
		}
		h.hs.SetServingStatus(DependencyPrefix+name, st)
	}
	h.hs.SetServingStatus("", overall)
	h.hs.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	for _, s := range h.services {
		h.hs.SetServingStatus(s, overall)
	}
}

func (h *Health) shutdown() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.hs.Shutdown()
}
