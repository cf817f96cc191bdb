package modelgateway_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

// API keys must be marked secret so config dumps redact them. (That every
// variable deploy/k8s sets is one a service reads is checked for all
// services by cmd/agentmesh's TestKubernetesEnvMatchesConfig.)
func TestAPIKeysAreSecret(t *testing.T) {
	t.Parallel()
	for _, secret := range []string{"DEEPSEEK_API_KEY", "QWEN_API_KEY", "OPENAI_API_KEY", "GATEWAY_API_KEYS"} {
		found := false
		for _, v := range config.Vars("", &modelgateway.Config{}) {
			if v.Name == secret {
				found = true
				if !v.Secret {
					t.Errorf("%s is not marked secret", secret)
				}
			}
		}
		if !found {
			t.Errorf("%s is not a configuration variable", secret)
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
		"negative simulator pace":   {map[string]string{"MODELGATEWAY_PROVIDER": "sim", "MODELGATEWAY_SIM_LATENCY": "-1s"}, "MODELGATEWAY_SIM_LATENCY"},
		"OpenAI listener's bad keys": {map[string]string{"MODELGATEWAY_PROVIDER": "sim", "MODELGATEWAY_OPENAI_ADDR": "127.0.0.1:0", "GATEWAY_API_KEYS": "k1=acme,k1=globex"},
			"GATEWAY_API_KEYS: entry 2: duplicate key"},
		"OpenAI listener's address": {map[string]string{"MODELGATEWAY_PROVIDER": "sim", "MODELGATEWAY_OPENAI_ADDR": "256.0.0.1:x"}, "MODELGATEWAY_OPENAI_ADDR"},
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
