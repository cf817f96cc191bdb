package modelgateway_test

import (
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

// Every variable the Kubernetes manifest sets must be one the service reads.
func TestDeploymentVariablesExistInConfig(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../../deploy/k8s/base/modelgateway.yaml")
	if err != nil {
		t.Skipf("manifest not found: %v", err)
	}
	known := map[string]bool{}
	for _, v := range config.Vars("", &modelgateway.Config{}) {
		known[v.Name] = true
	}
	names := regexp.MustCompile(`-\s+(?:\{\s*)?name:\s+([A-Z][A-Z0-9_]+)`).FindAllStringSubmatch(string(b), -1)
	if len(names) == 0 {
		t.Fatal("no env names found in the manifest")
	}
	for _, m := range names {
		if !known[m[1]] {
			t.Errorf("deploy/k8s sets %s, which modelgateway.Config does not read", m[1])
		}
	}
	for _, secret := range []string{"DEEPSEEK_API_KEY", "QWEN_API_KEY", "OPENAI_API_KEY"} {
		for _, v := range config.Vars("", &modelgateway.Config{}) {
			if v.Name == secret && !v.Secret {
				t.Errorf("%s is not marked secret", secret)
			}
		}
	}
}

func TestBadConfigurationStopsTheStartNamingIt(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		env  map[string]string
		want string
	}{
		"unknown provider override": {map[string]string{"MODELGATEWAY_PROVIDER": "anthropic"}, "MODELGATEWAY_PROVIDER"},
		"missing routing file":      {map[string]string{"MODELGATEWAY_CONFIG": "/nonexistent/routing.yaml"}, "/nonexistent/routing.yaml"},
		"unreadable key file":       {map[string]string{"DEEPSEEK_API_KEY_FILE": "/nonexistent/key"}, "DEEPSEEK_API_KEY_FILE"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var cfg modelgateway.Config
			if err := config.Load("", &cfg, config.Map(tc.env)); err != nil {
				t.Fatal(err)
			}
			lis := testkit.Listen(t)
			err := modelgateway.Run(t.Context(), &cfg, service.Runtime{Logger: slog.New(slog.DiscardHandler), Listener: lis})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
