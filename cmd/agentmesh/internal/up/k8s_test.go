package up

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
)

// TestKubernetesEnvMatchesConfig catches a manifest setting a variable that
// no config struct reads: such a typo sits unnoticed while a default happens
// to be right.
func TestKubernetesEnvMatchesConfig(t *testing.T) {
	t.Parallel()
	configs := map[string]any{}
	for _, c := range Components() {
		if !strings.HasPrefix(c.Name, "agentmesh ") {
			configs[c.Name] = c.Config
		}
	}
	envName := regexp.MustCompile(`name: ([A-Z][A-Z0-9_]+)\b`)
	base := filepath.Join("..", "..", "..", "..", "deploy", "k8s", "base")
	for svc, cfg := range configs {
		known := map[string]bool{}
		for _, v := range config.Vars("", cfg) {
			known[v.Name] = true
		}
		data, err := os.ReadFile(filepath.Join(base, svc+".yaml"))
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		found := envName.FindAllStringSubmatch(string(data), -1)
		if len(found) == 0 {
			t.Fatalf("%s.yaml sets no environment variables; the pattern is broken", svc)
		}
		for _, m := range found {
			if !known[m[1]] && !goRuntimeVars[m[1]] {
				t.Errorf("deploy/k8s/base/%s.yaml sets %s, which %s's Config does not read (known: %s)", svc, m[1], svc, strings.Join(keys(known), ", "))
			}
		}
	}
}

// goRuntimeVars are read by the Go runtime itself, not by a config struct.
var goRuntimeVars = map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

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
