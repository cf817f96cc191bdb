package up

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
)

// TestReadmeListsEveryVariable keeps the README's configuration table true.
func TestReadmeListsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Components() {
		for _, v := range config.Vars("", c.Config) {
			if !strings.Contains(string(readme), "`"+v.Name+"`") {
				t.Errorf("README.md does not document %s (read by %s); regenerate the table with `go run ./cmd/agentmesh env`", v.Name, c.Name)
			}
		}
	}
}

// TestServiceConfigErrorNamesMissingVariables is what an operator sees when a
// deployment forgets a required variable.
func TestServiceConfigErrorNamesMissingVariables(t *testing.T) {
	t.Parallel()
	for _, c := range Components() {
		var required []string
		for _, v := range config.Vars("", c.Config) {
			if v.Required {
				required = append(required, v.Name)
			}
		}
		err := config.Load("", c.Config, config.Map(nil))
		if len(required) == 0 {
			if err != nil {
				t.Errorf("%s: loading an empty environment failed: %v", c.Name, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s: loading an empty environment succeeded, want an error naming %v", c.Name, required)
			continue
		}
		for _, name := range required {
			if !strings.Contains(err.Error(), name) {
				t.Errorf("%s: error %q does not name %s", c.Name, err, name)
			}
		}
	}
}

// TestGatewayServesThisMachineByDefault: without GATEWAY_API_KEYS the
// gateway is open (development mode), so `agentmesh up` listens on loopback
// unless HTTP_ADDR says otherwise, as its services do (AGENTMESH_HOST).
func TestGatewayServesThisMachineByDefault(t *testing.T) {
	t.Parallel()
	var cfg Config
	if err := config.Load("", &cfg, config.Map(map[string]string{})); err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.HTTPAddr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		t.Errorf("HTTP_ADDR defaults to %q, want a loopback address", cfg.HTTPAddr)
	}
	if ip := net.ParseIP(cfg.Host); ip == nil || !ip.IsLoopback() {
		t.Errorf("AGENTMESH_HOST defaults to %q, want a loopback address", cfg.Host)
	}
}
