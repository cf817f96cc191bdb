package httpgateway_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// TestCrossSiteWritesRefusedWithoutKeys: without API keys (development
// mode) nothing identifies a caller, so a page of another site that a
// developer opens could write through the gateway with a form or a
// text/plain POST, which browsers send across sites without asking. Such a
// request (Sec-Fetch-Site: cross-site, set by browsers; from browsers that
// predate it, an Origin of another host) is refused unless
// GATEWAY_CORS_ORIGINS allows its origin; reads, same-site pages, and
// clients that are not browsers go through, and with API keys the key is
// what decides.
func TestCrossSiteWritesRefusedWithoutKeys(t *testing.T) {
	t.Parallel()
	var created atomic.Int32
	conversations := countingConversations(&created)
	open := startMesh(t, httpgateway.Config{}, fakes{conversations: conversations})
	withCORS := startMesh(t, httpgateway.Config{CORSOrigins: []string{"https://app.example.com"}}, fakes{conversations: conversations})
	keyed := startMesh(t, httpgateway.Config{APIKeys: "k1=acme"}, fakes{conversations: conversations})
	form := map[string]string{"Content-Type": "text/plain", "Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"}
	for _, tc := range []struct {
		name, url, method string
		header            map[string]string
		status            int
	}{
		{"a cross-site POST without keys", open.url, http.MethodPost, form, http.StatusForbidden},
		{"the same POST from curl", open.url, http.MethodPost, map[string]string{"Content-Type": "text/plain"}, http.StatusOK},
		{"the same POST from the console (same origin)", open.url, http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"from another port of the host (same site)", open.url, http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:3000"}, http.StatusOK},
		{"a cross-site read", open.url, http.MethodGet, form, http.StatusOK},
		{"a cross-site POST from an allowed origin", withCORS.url, http.MethodPost,
			map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "https://app.example.com"}, http.StatusOK},
		{"a cross-site POST from another origin", withCORS.url, http.MethodPost, form, http.StatusForbidden},
		{"a cross-site POST with a key", keyed.url, http.MethodPost, map[string]string{"Sec-Fetch-Site": "cross-site", "X-API-Key": "k1"}, http.StatusOK},
		// Browsers that predate Sec-Fetch-Site send Origin alone.
		{"an older browser's cross-site POST", open.url, http.MethodPost, map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, http.StatusForbidden},
		{"an older browser's POST from a sandboxed frame", open.url, http.MethodPost, map[string]string{"Content-Type": "text/plain", "Origin": "null"}, http.StatusForbidden},
		{"an older browser's POST from a host named like the gateway's", open.url, http.MethodPost, map[string]string{"Origin": "http://127.0.0.1.evil.example"}, http.StatusForbidden},
		{"an older browser's POST from the console", open.url, http.MethodPost, map[string]string{"Origin": open.url}, http.StatusOK},
		{"an older browser's POST from another port of the host", open.url, http.MethodPost, map[string]string{"Origin": "http://127.0.0.1:3000"}, http.StatusOK},
		{"an older browser's POST from an allowed origin", withCORS.url, http.MethodPost, map[string]string{"Origin": "https://app.example.com"}, http.StatusOK},
	} {
		before := created.Load()
		resp, body := do(t, tc.method, tc.url+"/v1/conversations", map[string]string{http.MethodPost: `{"title":"t"}`}[tc.method], tc.header)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
		if tc.status == http.StatusForbidden && (created.Load() != before || !strings.Contains(string(body), "GATEWAY_API_KEYS")) {
			t.Errorf("%s: refused with %s after %d creations, want nothing created and the remedy named", tc.name, body, created.Load()-before)
		}
	}
}

// TestRebindingRefusedWithoutKeys: a page can point its own name at the
// developer's machine (DNS rebinding); to the browser its requests are then
// same-origin, so Sec-Fetch-Site and Origin pass and it may read what it
// gets. Without API keys, a browser's request that reached the gateway by a
// name other than localhost or an IP address, and that no origin in
// GATEWAY_CORS_ORIGINS names, is refused, reads included; clients that are
// not browsers, and any request with a key, are not.
func TestRebindingRefusedWithoutKeys(t *testing.T) {
	t.Parallel()
	conversations := countingConversations(new(atomic.Int32))
	open := startMesh(t, httpgateway.Config{}, fakes{conversations: conversations})
	withCORS := startMesh(t, httpgateway.Config{CORSOrigins: []string{"http://dev.example.com:8080"}}, fakes{conversations: conversations})
	keyed := startMesh(t, httpgateway.Config{APIKeys: "k1=acme"}, fakes{conversations: conversations})
	rebound := map[string]string{"Host": "evil.example:8080", "Sec-Fetch-Site": "same-origin"}
	for _, tc := range []struct {
		name, url, method string
		header            map[string]string
		status            int
	}{
		{"a browser's read by a rebound name", open.url, http.MethodGet, rebound, http.StatusForbidden},
		{"a browser's write by a rebound name", open.url, http.MethodPost, rebound, http.StatusForbidden},
		{"an older browser's read by a rebound name (Origin only)", open.url, http.MethodGet,
			map[string]string{"Host": "evil.example", "Origin": "http://evil.example"}, http.StatusForbidden},
		{"a rebound name written with a trailing dot and capitals", open.url, http.MethodGet,
			map[string]string{"Host": "Evil.Example.:8080", "Sec-Fetch-Site": "none"}, http.StatusForbidden},
		{"curl by the same name", open.url, http.MethodGet, map[string]string{"Host": "evil.example:8080"}, http.StatusOK},
		{"a browser at localhost", open.url, http.MethodGet, map[string]string{"Host": "localhost:8080", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a browser at a .localhost name", open.url, http.MethodPost, map[string]string{"Host": "app.localhost:8080", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a browser at an IP address", open.url, http.MethodGet, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a browser at an IPv6 address", open.url, http.MethodGet, map[string]string{"Host": "[::1]:8080", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a browser at a name an allowed origin has", withCORS.url, http.MethodPost,
			map[string]string{"Host": "dev.example.com:8080", "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"a browser at another name with CORS set", withCORS.url, http.MethodGet, rebound, http.StatusForbidden},
		{"a browser at a rebound name with a key", keyed.url, http.MethodGet,
			map[string]string{"Host": "evil.example:8080", "Sec-Fetch-Site": "same-origin", "X-API-Key": "k1"}, http.StatusOK},
	} {
		resp, body := do(t, tc.method, tc.url+"/v1/conversations", map[string]string{http.MethodPost: `{"title":"t"}`}[tc.method], tc.header)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.status)
		}
		if tc.status == http.StatusForbidden && !strings.Contains(string(body), "DNS rebinding") {
			t.Errorf("%s: refused with %s, want the reason and the remedy named", tc.name, body)
		}
	}
}

// countingConversations creates conversation c1, counting the creations in
// created, and lists none.
func countingConversations(created *atomic.Int32) *conversationFake {
	return &conversationFake{create: func(context.Context, *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
		created.Add(1)
		return &orchestratorv1.CreateConversationResponse{Conversation: &orchestratorv1.Conversation{Id: "c1"}}, nil
	}, list: func(context.Context, *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
		return &orchestratorv1.ListConversationsResponse{}, nil
	}}
}
