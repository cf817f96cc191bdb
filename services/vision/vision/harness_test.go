package vision_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// simModel is the provider model id the logical model "vision" routes
// to, simSmallModel the one "vision-small" routes to.
const (
	simModel      = "sim-vl"
	simSmallModel = "sim-vl-small"
)

// providerType is the gateway provider type speaking each simulator flavour.
var providerType = map[providersim.Flavor]string{
	providersim.Qwen:   "qwen",
	providersim.Ollama: "ollama",
	providersim.OpenAI: "openai",
}

// mesh is a vision service in front of the real model gateway in front of a
// provider simulator, all in-process on loopback ports.
type mesh struct {
	sim    *providersim.Server
	client visionv1.VisionServiceClient
}

// startMesh starts the simulator (flavour f, with its documented quirks),
// the model gateway routing "vision" to it, and the vision service with env
// over its defaults. Everything stops in t.Cleanup.
func startMesh(t *testing.T, f providersim.Flavor, env map[string]string) *mesh {
	t.Helper()
	sim := providersim.Start(t, providersim.Preset(f))
	routing := fmt.Sprintf("providers:\n  up: {type: %s, base_url: %q}\nmodels:\n  vision:\n    - {provider: up, model: %s}\n  vision-small:\n    - {provider: up, model: %s}\n",
		providerType[f], sim.URL, simModel, simSmallModel)
	gwAddr := modelgatewaytest.Start(t, routing, map[string]string{
		"MODELGATEWAY_MAX_ATTEMPTS":   "1", // a scripted provider error surfaces at once
		"MODELGATEWAY_PROBE_INTERVAL": "1h",
		"QWEN_API_KEY":                "test-key",
		"OPENAI_API_KEY":              "test-key",
	})

	vars := map[string]string{"MODELGATEWAY_ADDR": gwAddr}
	for k, v := range env {
		vars[k] = v
	}
	var cfg vision.Config
	if err := config.Load("", &cfg, config.Map(vars)); err != nil {
		t.Fatalf("vision config: %v", err)
	}
	addr := testkit.RunService(t, "vision", func(ctx context.Context, rt service.Runtime) error {
		return vision.Run(ctx, &cfg, rt)
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &mesh{sim: sim, client: visionv1.NewVisionServiceClient(conn)}
}

// pngImage returns a small, real PNG whose pixels depend on seed.
func pngImage(t *testing.T, seed uint8) []byte { return testkit.PNG(t, seed) }

func scope() *commonv1.Scope { return &commonv1.Scope{TenantId: "acme", ProjectId: "intake"} }

func ctxTimeout(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantStatus fails unless err is a status with code; it returns the status.
func wantStatus(t *testing.T, err error, code codes.Code) *status.Status {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("error = %v, want code %v", err, code)
	}
	return st
}

// badRequestField returns the field named by a google.rpc.BadRequest detail.
func badRequestField(st *status.Status) string {
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			return br.GetFieldViolations()[0].GetField()
		}
	}
	return ""
}
