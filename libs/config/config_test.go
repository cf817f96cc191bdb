package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/config"
)

type nested struct {
	URL string `env:"URL" default:"nats://localhost:4222"`
}

type sample struct {
	Addr     string        `env:"ADDR" default:":9090" help:"listen address"`
	MongoURI string        `env:"MONGO_URI" required:"true" secret:"true"`
	APIKey   string        `env:"API_KEY" secret:"true"`
	Timeout  time.Duration `env:"TIMEOUT" default:"30s"`
	Workers  int           `env:"WORKERS" default:"4"`
	Debug    bool          `env:"DEBUG"`
	Models   []string      `env:"MODELS" default:"chat, embed"`
	Metrics  string        `env:"METRICS" default:":9464" allowempty:"true"`
	NATS     nested        `env:"NATS_"`
	ignored  string
}

func TestLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    func(t *testing.T, c sample)
		wantErr string
	}{
		{
			name: "defaults and values",
			env:  map[string]string{"X_MONGO_URI": "mongodb://h", "X_WORKERS": "8", "X_NATS_URL": "nats://n:1"},
			want: func(t *testing.T, c sample) {
				if c.Addr != ":9090" || c.Workers != 8 || c.Timeout != 30*time.Second || c.NATS.URL != "nats://n:1" {
					t.Fatalf("unexpected config %+v", c)
				}
				if len(c.Models) != 2 || c.Models[1] != "embed" {
					t.Fatalf("models = %q", c.Models)
				}
			},
		},
		{
			name: "empty is unset, unless the field allows empty",
			env:  map[string]string{"X_MONGO_URI": "m", "X_ADDR": "", "X_METRICS": ""},
			want: func(t *testing.T, c sample) {
				if c.Addr != ":9090" || c.Metrics != "" {
					t.Fatalf("addr %q, metrics %q; want the default and empty", c.Addr, c.Metrics)
				}
			},
		},
		{
			name: "unset takes the default, also where empty is allowed",
			env:  map[string]string{"X_MONGO_URI": "m"},
			want: func(t *testing.T, c sample) {
				if c.Metrics != ":9464" {
					t.Fatalf("metrics %q, want the default", c.Metrics)
				}
			},
		},
		{
			name:    "missing required names the variable",
			env:     map[string]string{},
			wantErr: "missing required environment variable(s): X_MONGO_URI",
		},
		{
			name:    "invalid duration names the variable",
			env:     map[string]string{"X_MONGO_URI": "m", "X_TIMEOUT": "soon"},
			wantErr: `X_TIMEOUT="soon"`,
		},
		{
			name:    "invalid secret value is masked",
			env:     map[string]string{"X_MONGO_URI": "m", "X_WORKERS": "many"},
			wantErr: "X_WORKERS",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c sample
			err := config.Load("X_", &c, config.Map(tc.env))
			if tc.wantErr != "" {
				var cerr *config.Error
				if !errors.As(err, &cerr) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.want(t, c)
		})
	}
}

func TestRedactedMasksSecrets(t *testing.T) {
	t.Parallel()
	c := sample{MongoURI: "mongodb://user:pw@h", APIKey: "sk-123", Addr: ":1"}
	r := config.Redacted("X_", c)
	if r["X_MONGO_URI"] != "***" || r["X_API_KEY"] != "***" || r["X_ADDR"] != ":1" {
		t.Fatalf("redacted = %v", r)
	}
	for _, v := range r {
		if strings.Contains(v, "sk-123") || strings.Contains(v, "pw") {
			t.Fatalf("secret leaked: %v", r)
		}
	}
}

func TestVarsListsEveryVariable(t *testing.T) {
	t.Parallel()
	var names []string
	for _, v := range config.Vars("X_", sample{}) {
		names = append(names, v.Name)
	}
	want := "X_ADDR X_API_KEY X_DEBUG X_METRICS X_MODELS X_MONGO_URI X_NATS_URL X_TIMEOUT X_WORKERS"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("vars = %s, want %s", got, want)
	}
}
