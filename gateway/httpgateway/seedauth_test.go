package httpgateway_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
)

// A client of the original classification agent sends its own model
// provider's key as "Authorization: Bearer ..."; it authenticates to the
// gateway with X-API-Key. Whenever X-API-Key is present it alone decides:
// the bearer token is neither checked nor forwarded.
func TestSeedClientAuthenticatesWithXAPIKey(t *testing.T) {
	t.Parallel()
	conv, calls := scopeRecorder()
	m := startMesh(t, httpgateway.Config{APIKeys: "key-acme=acme:web@alice, key-globex=globex"}, fakes{conversations: conv})
	cases := []struct {
		name   string
		header http.Header
		status int
		tenant string
	}{
		{"gateway key beside a provider key", http.Header{"X-Api-Key": {"key-acme"}, "Authorization": {"Bearer sk-openai-provider-key"}}, http.StatusOK, "acme"},
		{"gateway key beside another tenant's gateway key", http.Header{"X-Api-Key": {"key-acme"}, "Authorization": {"Bearer key-globex"}}, http.StatusOK, "acme"},
		{"invalid gateway key beside a valid bearer", http.Header{"X-Api-Key": {"key-acm"}, "Authorization": {"Bearer key-acme"}}, http.StatusUnauthorized, ""},
		{"empty gateway key beside a valid bearer", http.Header{"X-Api-Key": {""}, "Authorization": {"Bearer key-acme"}}, http.StatusUnauthorized, ""},
		{"gateway key given twice", http.Header{"X-Api-Key": {"key-acme", "key-globex"}}, http.StatusUnauthorized, ""},
		{"bearer alone still works", http.Header{"Authorization": {"Bearer key-globex"}}, http.StatusOK, "globex"},
		{"provider key alone", http.Header{"Authorization": {"Bearer sk-openai-provider-key"}}, http.StatusUnauthorized, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest("POST", m.url+"/v1/conversations", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			for k, vs := range tc.header {
				for _, v := range vs {
					req.Header.Add(k, v)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.status != http.StatusOK {
				return
			}
			got := waitFor(t, calls, "CreateConversation")
			if strings.Join(got.tenant, ",") != tc.tenant {
				t.Errorf("tenant %q, want %q", got.tenant, tc.tenant)
			}
			if len(got.auth) != 0 || len(got.gwAuth) != 0 {
				t.Errorf("the bearer token travelled on to the service: %q %q", got.auth, got.gwAuth)
			}
		})
	}
}
