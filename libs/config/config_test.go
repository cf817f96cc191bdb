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
	Level    string        `env:"LEVEL" default:"info" oneof:"debug,info,warn,error"`
	Ratio    float64       `env:"RATIO" default:"1" min:"0" max:"1"`
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
			name: "a oneof value is matched ignoring case and stored as listed",
			env:  map[string]string{"X_MONGO_URI": "m", "X_LEVEL": "WARN", "X_RATIO": "0"},
			want: func(t *testing.T, c sample) {
				if c.Level != "warn" || c.Ratio != 0 {
					t.Fatalf("level %q, ratio %v", c.Level, c.Ratio)
				}
			},
		},
		{
			name:    "a value outside oneof names the variable and the allowed values",
			env:     map[string]string{"X_MONGO_URI": "m", "X_LEVEL": "verbose"},
			wantErr: `X_LEVEL="verbose": must be one of debug, info, warn, error`,
		},
		{
			name:    "a number above max names the variable",
			env:     map[string]string{"X_MONGO_URI": "m", "X_RATIO": "1.5"},
			wantErr: `X_RATIO="1.5": must be at most 1`,
		},
		{
			name:    "a number below min names the variable",
			env:     map[string]string{"X_MONGO_URI": "m", "X_RATIO": "-0.1"},
			wantErr: `X_RATIO="-0.1": must be at least 0`,
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

// TestLoadReportsEveryProblemAtOnce: a start with several bad variables
// names all of them in one error, so a user fixes them in one go.
func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	var c sample
	err := config.Load("X_", &c, config.Map(map[string]string{
		"X_LEVEL": "verbose", "X_TIMEOUT": "soon", "X_RATIO": "2", "X_API_KEY": "", "X_WORKERS": "many",
	}))
	var cerr *config.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("err = %v, want *config.Error", err)
	}
	if strings.Join(cerr.Missing, " ") != "X_MONGO_URI" {
		t.Errorf("missing = %q, want X_MONGO_URI", cerr.Missing)
	}
	var names []string
	for _, inv := range cerr.Invalid {
		name, _, _ := strings.Cut(inv, "=")
		names = append(names, name)
	}
	if got, want := strings.Join(names, " "), "X_TIMEOUT X_WORKERS X_LEVEL X_RATIO"; got != want {
		t.Errorf("invalid = %q, want %s (in field order)", cerr.Invalid, want)
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
	want := "X_ADDR X_API_KEY X_DEBUG X_LEVEL X_METRICS X_MODELS X_MONGO_URI X_NATS_URL X_RATIO X_TIMEOUT X_WORKERS"
	if got := strings.Join(names, " "); got != want {
		t.Fatalf("vars = %s, want %s", got, want)
	}
}
