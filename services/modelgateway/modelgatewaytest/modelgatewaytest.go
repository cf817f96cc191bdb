// Package modelgatewaytest runs the real model gateway in-process for other
// services' tests, usually in front of a provider simulator
// (libs/testkit/providersim), as httptest runs an HTTP server.
package modelgatewaytest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

// Start runs the model gateway configured by Config(t, routing, env) and
// returns its loopback address; the gateway stops in t.Cleanup.
func Start(t testing.TB, routing string, env map[string]string) string {
	t.Helper()
	cfg := Config(t, routing, env)
	return testkit.RunService(t, "modelgateway", func(ctx context.Context, rt service.Runtime) error {
		return modelgateway.Run(ctx, cfg, rt)
	})
}

// StartWithOpenAI is Start with the gateway's own OpenAI-compatible
// listener on a loopback port too (MODELGATEWAY_OPENAI_ADDR); it returns
// the gRPC address and the API's base URL, http://127.0.0.1:PORT/openai/v1.
func StartWithOpenAI(t testing.TB, routing string, env map[string]string) (addr, openAIBase string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return StartWithOpenAIOn(t, lis, routing, env)
}

// StartWithOpenAIOn is StartWithOpenAI with the OpenAI-compatible API on
// lis, a listener whose address the test knew before (to name the
// replicas in MODELGATEWAY_OPENAI_PEERS, say).
func StartWithOpenAIOn(t testing.TB, lis net.Listener, routing string, env map[string]string) (addr, openAIBase string) {
	t.Helper()
	cfg := Config(t, routing, env)
	cfg.OpenAIListener = lis
	addr = testkit.RunService(t, "modelgateway", func(ctx context.Context, rt service.Runtime) error {
		return modelgateway.Run(ctx, cfg, rt)
	})
	return addr, "http://" + lis.Addr().String() + "/openai/v1"
}

// Config loads the gateway's configuration from env (its variables, as a
// deployment sets them) and routing, the routing table in YAML written to a
// file for MODELGATEWAY_CONFIG ("" leaves the variable to env).
func Config(t testing.TB, routing string, env map[string]string) *modelgateway.Config {
	t.Helper()
	vars := make(map[string]string, len(env)+1)
	for k, v := range env {
		vars[k] = v
	}
	if routing != "" {
		path := filepath.Join(t.TempDir(), "routing.yaml")
		if err := os.WriteFile(path, []byte(routing), 0o600); err != nil {
			t.Fatal(err)
		}
		vars["MODELGATEWAY_CONFIG"] = path
	}
	var cfg modelgateway.Config
	if err := config.Load("", &cfg, config.Map(vars)); err != nil {
		t.Fatalf("model gateway config: %v", err)
	}
	return &cfg
}
