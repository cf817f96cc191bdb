package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/gateway/mcpserver"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
)

func (a *app) modelsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "models",
		Short: "list the logical models and the providers behind them",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			res, err := modelv1.NewModelServiceClient(m.model).ListModels(ctx, &modelv1.ListModelsRequest{})
			if err != nil {
				return callErr("list models", err)
			}
			return a.emit(res, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "MODEL\tAVAILABLE\tROUTE (provider/model, in fallback order)")
				for _, lm := range res.GetModels() {
					var route []string
					for _, t := range lm.GetTargets() {
						s := t.GetProvider() + "/" + t.GetProviderModel()
						if !t.GetAvailable() {
							s += " (unavailable)"
						}
						route = append(route, s)
					}
					fmt.Fprintf(w, "%s\t%t\t%s\n", lm.GetName(), lm.GetAvailable(), strings.Join(route, " → "))
				}
			})
		}),
	}
}

// health is what `agentmesh health` prints: the gateway's /healthz body,
// or the same shape from each service's gRPC health check.
type health struct {
	Status   string                   `json:"status"`
	Services map[string]serviceHealth `json:"services"`
}

type serviceHealth struct {
	Status       string            `json:"status"`
	Dependencies map[string]string `json:"dependencies,omitempty"`
	Error        string            `json:"error,omitempty"`
}

func (a *app) healthCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "show whether every service and its dependencies serve (exit 4 when not)",
		Args:  noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			h, err := a.health(ctx, m)
			if err != nil {
				return err
			}
			if err := a.emit(h, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SERVICE\tSTATUS\tDEPENDENCIES")
				names := make([]string, 0, len(h.Services))
				for n := range h.Services {
					names = append(names, n)
				}
				sort.Strings(names)
				for _, n := range names {
					s := h.Services[n]
					var deps []string
					for d, st := range s.Dependencies {
						deps = append(deps, d+"="+st)
					}
					sort.Strings(deps)
					if s.Error != "" {
						deps = append(deps, "error: "+s.Error)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\n", n, s.Status, strings.Join(deps, " "))
				}
			}); err != nil {
				return err
			}
			if h.Status != healthpb.HealthCheckResponse_SERVING.String() {
				return status.Errorf(codes.Unavailable, "the mesh is %s", h.Status)
			}
			return nil
		}),
	}
}

func (a *app) health(ctx context.Context, m *mesh) (health, error) {
	var h health
	if m.gateway != nil {
		code, err := m.gateway.GetJSON(ctx, "/healthz", &h)
		if err != nil {
			return h, err
		}
		if h.Status == "" {
			return h, status.Errorf(codes.Unknown, "GET %s/healthz: HTTP %d without a status", m.gateway.URL(), code)
		}
		return h, nil
	}
	h = health{Status: healthpb.HealthCheckResponse_SERVING.String(), Services: map[string]serviceHealth{}}
	for name, cc := range map[string]grpc.ClientConnInterface{"orchestrator": m.orchestrator, "indexer": m.indexer, "classifier": m.classifier, "sqlagent": m.sqlgen, "modelgateway": m.model} {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		res, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		s := serviceHealth{Status: res.GetStatus().String()}
		if err != nil {
			s = serviceHealth{Status: healthpb.HealthCheckResponse_NOT_SERVING.String(), Error: status.Convert(err).Message()}
		}
		if s.Status != healthpb.HealthCheckResponse_SERVING.String() {
			h.Status = healthpb.HealthCheckResponse_NOT_SERVING.String()
		}
		h.Services[name] = s
	}
	return h, nil
}

// versionInfo is what `agentmesh version` prints.
type versionInfo struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	Commit  string `json:"commit,omitempty"`
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "print the CLI's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			v := versionInfo{Version: service.Version, Go: runtime.Version()}
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v.Commit = s.Value
					}
				}
			}
			return a.emit(v, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "agentmesh %s (%s", v.Version, v.Go)
				if v.Commit != "" {
					fmt.Fprintf(w, ", commit %.12s", v.Commit)
				}
				fmt.Fprintln(w, ")")
			})
		},
	}
}

func (a *app) mcpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "serve the mesh's tools to an MCP client on stdin/stdout",
		Long: `Serves the mesh's MCP tools (documents, analyses, read-only SQL) to one
MCP client over stdin and stdout, through the gateway (or --grpc), acting
for the API key's tenant or AGENTMESH_TENANT and AGENTMESH_PROJECT.`,
		Args: noArgs,
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, _ []string, m *mesh) error {
			in, _ := a.io.In.(io.ReadCloser)
			if in == nil {
				in = io.NopCloser(a.io.In)
			}
			b := mcpserver.Backends{Orchestrator: m.orchestrator, Indexer: m.indexer, SQLAgent: m.sqlgen}
			return serveMCP(ctx, b, mcpserver.Scope{Tenant: m.s.tenant, Project: m.s.project}, in, nopWriteCloser{a.io.Out})
		}),
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// jsonRPCLines passes on the lines of in that are JSON-RPC 2.0 messages
// (an object, or a batch of them, with "jsonrpc": "2.0") and answers each
// other line itself on out with JSON-RPC's error (-32700 parse error,
// -32600 invalid request): the SDK's transport ends the session at the
// first such line, so one stray line (a log, a typo) stopped the server
// and every request after it went unanswered.
func jsonRPCLines(in io.ReadCloser, out io.Writer) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		r := bufio.NewReader(in)
		for {
			line, err := r.ReadBytes('\n')
			if msg := bytes.TrimSpace(line); len(msg) > 0 {
				if code, id, why := mcpserver.CheckMessage(msg); code != 0 {
					_, _ = out.Write(append(mcpserver.ErrorResponse(code, id, why), '\n'))
					line = nil // answered here
				}
			}
			if len(line) > 0 {
				if _, werr := pw.Write(line); werr != nil {
					in.Close()
					return
				}
			}
			if err != nil {
				pw.CloseWithError(err)
				return
			}
		}
	}()
	return pr
}

// lockedWriter serializes writes: the MCP session's answers and
// jsonRPCLines' errors share stdout, a message per write.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error {
	if c, ok := l.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// serveMCP serves the MCP tools over in and out until the client closes
// in or ctx ends.
func serveMCP(ctx context.Context, b mcpserver.Backends, scope mcpserver.Scope, in io.ReadCloser, out io.WriteCloser) error {
	if err := grpcx.ValidScopeID(scope.Tenant); err != nil {
		return usagef("AGENTMESH_TENANT %v", err)
	}
	if scope.Project != "" {
		if err := grpcx.ValidScopeID(scope.Project); err != nil {
			return usagef("AGENTMESH_PROJECT %v", err)
		}
	}
	server := mcpserver.New(b, func(context.Context) (mcpserver.Scope, error) { return scope, nil })
	w := &lockedWriter{w: out}
	err := server.Run(ctx, &mcp.IOTransport{Reader: jsonRPCLines(in, w), Writer: w})
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, context.Canceled) || errors.Is(err, mcp.ErrConnectionClosed)) {
		return nil // the client closed stdin, or the user interrupted
	}
	return err
}
