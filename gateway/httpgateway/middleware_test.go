package httpgateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

func TestCORSPreflightNeedsNoKey(t *testing.T) {
	t.Parallel()
	conv, _ := scopeRecorder()
	m := startMesh(t, httpgateway.Config{APIKeys: "k=acme", CORSOrigins: []string{"https://console.example"}}, fakes{conversations: conv})

	resp, _ := do(t, "OPTIONS", m.url+"/v1/conversations", "", map[string]string{
		"Origin": "https://console.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization",
	})
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "https://console.example" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "Authorization") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "POST", m.url+"/v1/conversations", "{}", map[string]string{"Origin": "https://console.example", "Authorization": "Bearer k"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://console.example" {
		t.Fatalf("request: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = do(t, "OPTIONS", m.url+"/v1/conversations", "", map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("an unlisted origin was allowed: %v", resp.Header)
	}
}

func TestRequestIDAndBodyLimit(t *testing.T) {
	t.Parallel()
	ids := make(chan []string, 2)
	m := startMesh(t, httpgateway.Config{MaxBodyBytes: 64}, fakes{conversations: &conversationFake{
		create: func(ctx context.Context, _ *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
			ids <- incoming(ctx, "x-request-id")
			return &orchestratorv1.CreateConversationResponse{}, nil
		},
	}})
	resp, body := do(t, "POST", m.url+"/v1/conversations", `{"title":"t"}`, map[string]string{"X-Request-Id": "req-42"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Request-Id") != "req-42" {
		t.Fatalf("status %d, X-Request-Id %q: %s", resp.StatusCode, resp.Header.Get("X-Request-Id"), body)
	}
	if got := waitFor(t, ids, "CreateConversation"); len(got) != 1 || got[0] != "req-42" {
		t.Fatalf("x-request-id metadata = %q", got)
	}
	resp, _ = do(t, "POST", m.url+"/v1/conversations", "{}", nil)
	if len(resp.Header.Get("X-Request-Id")) < 16 {
		t.Fatalf("no request id generated: %q", resp.Header.Get("X-Request-Id"))
	}
	waitFor(t, ids, "CreateConversation")
	// The services log the id they are sent: a client cannot put another
	// beside (or before) the one it was answered with, nor one the
	// gateway refused (too long, not printable).
	resp, _ = do(t, "POST", m.url+"/v1/conversations", "{}", map[string]string{
		"X-Request-Id": strings.Repeat("r", 200), "Grpc-Metadata-X-Request-Id": "forged",
	})
	if got := waitFor(t, ids, "CreateConversation"); len(got) != 1 || got[0] != resp.Header.Get("X-Request-Id") || len(got[0]) > 128 {
		t.Fatalf("x-request-id metadata = %q, want only the gateway's %q", got, resp.Header.Get("X-Request-Id"))
	}

	resp, body = do(t, "POST", m.url+"/v1/conversations", `{"title":"`+strings.Repeat("x", 100)+`"}`, nil)
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversized body: status %d: %s", resp.StatusCode, body)
	}
}
