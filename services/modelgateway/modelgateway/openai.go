package modelgateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/metadata"

	"github.com/agentmesh/agentmesh/libs/frontdoor"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/modelgateway/openaiapi"
)

// openAIServer is the OpenAI-compatible listener of a running gateway.
type openAIServer struct {
	done chan struct{} // closed when the server has shut down
}

// stop waits until the listener has shut down (Run's ctx ends it).
func (s *openAIServer) stop() {
	if s.done != nil {
		<-s.done
	}
}

// startOpenAI serves the OpenAI-compatible API (openaiapi) on
// MODELGATEWAY_OPENAI_ADDR, when set, until ctx ends: the API the REST
// gateway serves too, here in the process that runs ModelService, whose
// handlers it calls in process (grpcx.Local) instead of over a second
// process's gRPC hop. Keys, body limits and error shapes are the REST
// gateway's (frontdoor). After ctx ends, requests in flight get the gRPC
// server's shutdown grace.
func startOpenAI(ctx context.Context, cfg *Config, rt service.Runtime, api modelv1.ModelServiceServer) (*openAIServer, error) {
	lis := cfg.OpenAIListener
	if lis == nil && cfg.OpenAIAddr == "" {
		return &openAIServer{}, nil
	}
	log := rt.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	fail := func(err error) (*openAIServer, error) {
		if lis != nil {
			_ = lis.Close()
		}
		return nil, err
	}
	keys, err := frontdoor.ParseKeys(cfg.APIKeys)
	if err != nil {
		return fail(err)
	}
	local := grpcx.NewLocal(rt.Server, log)
	modelv1.RegisterModelServiceServer(local, api)
	h, err := openaiapi.New(openaiapi.Options{
		Client: modelv1.NewModelServiceClient(local),
		Caller: func(r *http.Request) (openaiapi.Caller, bool) {
			p, ok := frontdoor.PrincipalFrom(r.Context())
			return openaiapi.Caller{Tenant: p.Tenant, Project: p.Project, Key: p.Caller}, ok
		},
		Metadata: func(r *http.Request) metadata.MD {
			p, _ := frontdoor.PrincipalFrom(r.Context())
			return p.Metadata()
		},
		KeepAlive: cfg.OpenAIKeepAlive,
		Log:       log,
		Peers:     openaiapi.DNSPeers(cfg.OpenAIPeers),
	})
	if err != nil {
		return fail(err)
	}
	// Each request's id, span, duration metric and log line, as at the
	// REST gateway.
	obs, err := frontdoor.NewObserver("github.com/agentmesh/agentmesh/services/modelgateway/openaiapi", log)
	if err != nil {
		return fail(err)
	}
	obs.Route = h.Route
	if lis == nil {
		if lis, err = net.Listen("tcp", cfg.OpenAIAddr); err != nil {
			return nil, errors.New("MODELGATEWAY_OPENAI_ADDR: " + err.Error())
		}
	}
	door := &frontdoor.Door{Keys: keys, Limit: frontdoor.NewRateLimit(cfg.RateLimit, cfg.RateBurst)}
	limits := frontdoor.BodyLimits{MaxBytes: cfg.OpenAIMaxBodyBytes, Timeout: cfg.OpenAIBodyTimeout}
	if limits.MaxBytes <= 0 {
		limits.MaxBytes = 32 << 20
	}
	if limits.Timeout <= 0 {
		limits.Timeout = time.Minute
	}
	handler := obs.Wrap(frontdoor.Recover(log, openaiapi.WriteStatus,
		door.Authenticate(openaiapi.WriteStatus, frontdoor.ReadBody(limits, openaiapi.WriteStatus, h))))
	mode := "api keys"
	if keys.Open() {
		mode = "open (development: tenant from X-Tenant-Id)"
	}
	log.Info("serving the OpenAI-compatible API", "addr", lis.Addr().String(), "path", openaiapi.Prefix, "auth", mode)
	grace := rt.Server.WithDefaults().ShutdownTimeout // the gRPC server's
	s := &openAIServer{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := frontdoor.Serve(ctx, lis, handler, log, grace, nil); err != nil {
			log.Error("the OpenAI-compatible listener stopped", "error", err)
		}
	}()
	return s, nil
}
