package httpgateway_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// seen is the metadata one CreateConversation call arrived with.
type seen struct {
	tenant, project, caller, auth, gwAuth []string
}

// scopeRecorder is a ConversationService that reports each call's metadata.
func scopeRecorder() (*conversationFake, <-chan seen) {
	calls := make(chan seen, 16)
	return &conversationFake{
		create: func(ctx context.Context, _ *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
			calls <- seen{
				tenant:  incoming(ctx, grpcx.TenantMetadataKey),
				project: incoming(ctx, grpcx.ProjectMetadataKey),
				caller:  incoming(ctx, grpcx.CallerMetadataKey),
				auth:    incoming(ctx, "authorization"),
				gwAuth:  incoming(ctx, "grpcgateway-authorization"),
			}
			return &orchestratorv1.CreateConversationResponse{Conversation: &orchestratorv1.Conversation{Id: "c1"}}, nil
		},
	}, calls
}

func TestAPIKeysAuthenticateAndScope(t *testing.T) {
	t.Parallel()
	conv, calls := scopeRecorder()
	m := startMesh(t, httpgateway.Config{APIKeys: "key-acme=acme:web@alice, key-globex=globex, key-ops=*@ops"}, fakes{conversations: conv})

	t.Run("no key is 401", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, nil)
		if resp.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
		}
		if got := decode(t, body); got["code"] != float64(codes.Unauthenticated) || got["message"] == "" {
			t.Fatalf("body = %s", body)
		}
	})

	t.Run("wrong key is 401", func(t *testing.T) {
		for _, h := range []map[string]string{
			{"Authorization": "Bearer key-acm"},
			{"Authorization": "Bearer key-acme-and-more"},
			{"X-API-Key": "acme"},
			{"Authorization": "Basic key-acme"},
		} {
			resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, h)
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("%v: status %d: %s", h, resp.StatusCode, body)
			}
		}
	})

	t.Run("bearer key forwards its tenant, project and caller", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, map[string]string{"Authorization": "Bearer key-acme"})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := waitFor(t, calls, "CreateConversation")
		if strings.Join(got.tenant, ",") != "acme" || strings.Join(got.project, ",") != "web" || strings.Join(got.caller, ",") != "alice" {
			t.Fatalf("metadata tenant %q project %q caller %q", got.tenant, got.project, got.caller)
		}
		if len(got.auth) != 0 || len(got.gwAuth) != 0 {
			t.Fatalf("the API key travelled on to the service: %q %q", got.auth, got.gwAuth)
		}
	})

	t.Run("client-claimed tenant is overridden", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, map[string]string{
			"X-API-Key":                           "key-globex",
			"X-Tenant-Id":                         "acme",
			"X-Project-Id":                        "web",
			"Grpc-Metadata-X-Agentmesh-Tenant":    "acme",
			"Grpc-Metadata-X-Agentmesh-Project":   "web",
			"Grpc-Metadata-X-Agentmesh-Caller":    "alice",
			"X-Caller-Id":                         "alice",
			"Grpc-Metadata-x-agentmesh-something": "x",
		})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := waitFor(t, calls, "CreateConversation")
		// An unnamed key's caller is "key-" and the first 8 hex digits of its SHA-256.
		sum := sha256.Sum256([]byte("key-globex"))
		if strings.Join(got.tenant, ",") != "globex" || len(got.project) != 0 || strings.Join(got.caller, ",") != "key-"+hex.EncodeToString(sum[:4]) {
			t.Fatalf("metadata tenant %q project %q caller %q, want only the key's", got.tenant, got.project, got.caller)
		}
	})

	t.Run("an operator key forwards no tenant, whatever the client claims", func(t *testing.T) {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, map[string]string{
			"Authorization": "Bearer key-ops", "X-Tenant-Id": "acme", "Grpc-Metadata-X-Agentmesh-Tenant": "acme",
		})
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		got := waitFor(t, calls, "CreateConversation")
		if len(got.tenant) != 0 || len(got.project) != 0 || strings.Join(got.caller, ",") != "ops" {
			t.Fatalf("metadata tenant %q project %q caller %q, want no scope and caller ops", got.tenant, got.project, got.caller)
		}
	})

	t.Run("probes and the API description need no key", func(t *testing.T) {
		for _, p := range []string{"/livez", "/healthz", "/openapi.json"} {
			resp, body := do(t, "GET", m.url+p, "", nil)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("%s: status %d: %s", p, resp.StatusCode, body)
			}
		}
	})
}

func TestOpenModeTakesTenantFromHeader(t *testing.T) {
	t.Parallel()
	conv, calls := scopeRecorder()
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: conv})
	cases := []struct {
		name         string
		header       map[string]string
		tenant, proj string
	}{
		{"header", map[string]string{"X-Tenant-Id": "t1", "X-Project-Id": "p1", "X-Caller-Id": "dev@example.com"}, "t1", "p1"},
		{"default", nil, "default", ""},
		{"operator: no tenant", map[string]string{"X-Tenant-Id": "*", "X-Project-Id": "p1"}, "", ""},
	}
	for _, tc := range cases {
		resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, tc.header)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.name, resp.StatusCode, body)
		}
		got := waitFor(t, calls, "CreateConversation")
		if strings.Join(got.tenant, ",") != tc.tenant || strings.Join(got.project, ",") != tc.proj || strings.Join(got.caller, ",") != tc.header["X-Caller-Id"] {
			t.Fatalf("%s: tenant %q project %q caller %q", tc.name, got.tenant, got.project, got.caller)
		}
	}
	resp, body := do(t, "POST", m.url+"/v1/conversations", `{}`, map[string]string{"X-Tenant-Id": "a.b"})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "X-Tenant-Id") {
		t.Fatalf("tenant with a dot: status %d: %s", resp.StatusCode, body)
	}
}

func TestAPIKeysAreNeverLogged(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := startBackends(t, fakes{model: &modelFake{list: func(context.Context, *modelv1.ListModelsRequest) (*modelv1.ListModelsResponse, error) {
		return &modelv1.ListModelsResponse{}, nil
	}}})
	cfg := httpgateway.Config{APIKeys: "s3cret-key-1=acme"}
	h, err := httpgateway.Handler(&cfg, m.backends, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"s3cret-key-1", "s3cret-key-2"} {
		req, _ := http.NewRequest("GET", "/v1/models", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("a key reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"status":401`) || !strings.Contains(logs.String(), `"tenant":"acme"`) {
		t.Fatalf("expected one accepted and one refused request in the log:\n%s", logs.String())
	}

	for _, spec := range []string{"s3cret-key-1", "s3cret-key-1=acme@", "s3cret-key-1=acme@two words", "s3cret-key-1=*:web", "s3cret-key-1=a*"} {
		_, err = httpgateway.Handler(&httpgateway.Config{APIKeys: spec}, m.backends, log, nil)
		if err == nil || !strings.Contains(err.Error(), "GATEWAY_API_KEYS: entry 1") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("malformed GATEWAY_API_KEYS %q: err = %v, want the entry named without the key", strings.TrimPrefix(spec, "s3cret-key-1"), err)
		}
	}
}
