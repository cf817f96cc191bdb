package modelgateway_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
)

// gateway is a modelgateway started in-process with Run, on a loopback port.
type gateway struct {
	client modelv1.ModelServiceClient
	logs   *testkit.Buffer
}

// startGateway runs the service with env (on top of fast test defaults) and
// routing (YAML; empty = built-in default). It stops in t.Cleanup.
func startGateway(t *testing.T, env map[string]string, routing string) *gateway {
	return startGatewayTB(t, env, routing)
}

// startGatewayB starts a gateway for a benchmark and returns its client.
func startGatewayB(b *testing.B, routing string) modelv1.ModelServiceClient {
	return startGatewayTB(b, map[string]string{"MODELGATEWAY_PROBE_INTERVAL": "1h"}, routing).client
}

func startGatewayTB(t testing.TB, env map[string]string, routing string) *gateway {
	t.Helper()
	vars := map[string]string{
		"MODELGATEWAY_RETRY_BASE_DELAY": "10ms",
		"MODELGATEWAY_RETRY_MAX_DELAY":  "50ms",
		"MODELGATEWAY_PROBE_INTERVAL":   "100ms",
		"OLLAMA_HOST":                   closedPort(t),
	}
	for k, v := range env {
		vars[k] = v
	}
	cfg := modelgatewaytest.Config(t, routing, vars)
	logs := &testkit.Buffer{}
	addr := testkit.RunService(t, "modelgateway", func(ctx context.Context, rt service.Runtime) error {
		rt.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return modelgateway.Run(ctx, cfg, rt)
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &gateway{client: modelv1.NewModelServiceClient(conn), logs: logs}
}

// closedPort returns the URL of a loopback port nobody listens on.
func closedPort(t testing.TB) string {
	t.Helper()
	lis := testkit.Listen(t)
	addr := lis.Addr().String()
	_ = lis.Close()
	return "http://" + addr
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func userMsg(text string) *modelv1.Message {
	return &modelv1.Message{Role: modelv1.Role_ROLE_USER, Content: text}
}

func chatReq(model string, msgs ...*modelv1.Message) *modelv1.ChatRequest {
	return &modelv1.ChatRequest{Model: model, Messages: msgs}
}

// wantCode fails unless err is a status with code.
func wantCode(t *testing.T, err error, code codes.Code) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	return st
}

// streamAll reads a stream to its end.
func streamAll(t *testing.T, s grpc.ServerStreamingClient[modelv1.ChatStreamResponse]) ([]*modelv1.ChatStreamResponse, error) {
	t.Helper()
	var out []*modelv1.ChatStreamResponse
	for {
		m, err := s.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, m)
	}
}
