package service

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"regexp"
	"testing"

	"github.com/agentmesh/agentmesh/libs/config"
)

// TestMetricsAddr: METRICS_ADDR set to an address serves /metrics there;
// set but empty, it serves none (as the README says); unset, it is the
// default port.
func TestMetricsAddr(t *testing.T) {
	servingAt := regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)
	for _, tc := range []struct {
		name   string
		env    map[string]string
		serves bool
	}{
		{"an address", map[string]string{"METRICS_ADDR": "127.0.0.1:0"}, true},
		{"set but empty", map[string]string{"METRICS_ADDR": ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Common
			env := config.Overlay(config.Map(tc.env), config.Map(map[string]string{"GRPC_ADDR": "127.0.0.1:0"}))
			if err := config.Load("", &cfg, env); err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			ran := false
			err := serve("metrics-test", &cfg, &cfg, log, func(_ context.Context, _ *Common, rt Runtime) error {
				ran = true
				defer rt.Listener.Close()
				m := servingAt.FindStringSubmatch(logs.String())
				if (m != nil) != tc.serves || (!tc.serves && bytes.Contains(logs.Bytes(), []byte("metrics"))) {
					t.Fatalf("serving metrics: %v, want %v; logs:\n%s", m != nil, tc.serves, logs.String())
				}
				if m == nil {
					return nil
				}
				resp, err := http.Get("http://" + m[1] + "/metrics")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET /metrics: %d", resp.StatusCode)
				}
				return nil
			})
			if err != nil || !ran {
				t.Fatalf("serve: %v (service ran: %v)", err, ran)
			}
		})
	}
	var cfg Common
	if err := config.Load("", &cfg, config.Map(nil)); err != nil || cfg.MetricsAddr != ":9464" {
		t.Fatalf("METRICS_ADDR unset: %q, %v; want the default :9464", cfg.MetricsAddr, err)
	}
}
