package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/up"
	"github.com/agentmesh/agentmesh/libs/config"
)

var root = filepath.Join("..", "..", "..", "..")

// overlayRules says what each overlay promises beyond the common policy.
// An overlay missing here fails the test: a new one must say.
var overlayRules = map[string]struct{ gpu, inClusterMongo bool }{
	"production": {gpu: true, inClusterMongo: false},
	"dev":        {gpu: false, inClusterMongo: true},
}

// rules builds the policy's outside knowledge: each service's variables
// from its config struct (the structs `agentmesh env` and the README table
// come from), the Secrets README.md documents.
func rules(t *testing.T) Rules {
	t.Helper()
	r := Rules{
		EnvVars:     map[string]map[string]bool{},
		RuntimeVars: map[string]bool{"GOGC": true, "GOMEMLIMIT": true, "GOMAXPROCS": true},
		Secrets:     readmeSecrets(t),
		NoHPA: map[string]string{
			"vision": "its capacity is GPUs, which a CPU-utilization autoscaler cannot see",
		},
		TempDirs: map[string]string{
			"indexer":  "each PDF, for poppler's tools (services/indexer/internal/pipeline/pdf.go)",
			"sqlagent": "SQLite's temporary files of large sorts",
		},
	}
	for _, c := range up.Components() {
		if strings.HasPrefix(c.Name, "agentmesh ") {
			continue // the CLI and `agentmesh up` run in no pod
		}
		vars := map[string]bool{}
		for _, v := range config.Vars("", c.Config) {
			vars[v.Name] = true
		}
		r.EnvVars[c.Name] = vars
	}
	return r
}

// readmeSecrets reads the table of Secrets between the k8s-secrets markers
// of README.md: `secret` | `key` | feeds | notes, with the key required
// unless its notes say optional.
func readmeSecrets(t *testing.T) map[string]map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)<!-- k8s-secrets:start -->(.*?)<!-- k8s-secrets:end -->`).FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no <!-- k8s-secrets:start --> table")
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\| `([a-z0-9-]+)` \\|(.*)$")
	out := map[string]map[string]bool{}
	for _, r := range row.FindAllSubmatch(m[1], -1) {
		if out[string(r[1])] == nil {
			out[string(r[1])] = map[string]bool{}
		}
		// A row whose notes say "optional" names a key the Secret may lack.
		out[string(r[1])][string(r[2])] = !strings.Contains(string(r[3]), "optional")
	}
	if len(out) == 0 {
		t.Fatal("README.md's k8s-secrets table has no rows")
	}
	return out
}

func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(root, "deploy", "k8s", "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	if len(out) == 0 {
		t.Fatal("no overlays under deploy/k8s/overlays")
	}
	return out
}

func render(t *testing.T, overlay string) [][]byte {
	t.Helper()
	docs, err := Render(filepath.Join(root, "deploy", "k8s", "overlays", overlay))
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

func decode(t *testing.T, docs [][]byte) []Object {
	t.Helper()
	objs, err := Decode(docs)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestOverlaysHoldThePolicy renders every overlay as `kubectl apply -k`
// would, decodes every object strictly into its k8s.io/api type, and holds
// it to the deployment policy. The log is the policy's list with counts.
func TestOverlaysHoldThePolicy(t *testing.T) {
	t.Parallel()
	r := rules(t)
	for _, name := range overlays(t) {
		t.Run(name, func(t *testing.T) {
			or, ok := overlayRules[name]
			if !ok {
				t.Fatalf("overlay %s is not in overlayRules: say whether it has GPU nodes and its own MongoDB", name)
			}
			r := r
			r.GPU, r.InClusterMongo = or.gpu, or.inClusterMongo
			objs := decode(t, render(t, name))
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.Kind]++
			}
			var ks []string
			for k, n := range kinds {
				ks = append(ks, fmt.Sprintf("%s %d", k, n))
			}
			sort.Strings(ks)
			t.Logf("overlay %s: %d objects decoded strictly (unknown fields rejected): %s", name, len(objs), strings.Join(ks, ", "))
			for _, res := range Check(objs, r) {
				verdict := "ok"
				if len(res.Violations) > 0 {
					verdict = fmt.Sprintf("%d VIOLATIONS", len(res.Violations))
				}
				t.Logf("  [%s] %s (%s)", verdict, res.Name, res.Checked)
				for _, v := range res.Violations {
					t.Errorf("overlay %s: %s: %s", name, res.Name, v)
				}
			}
		})
	}
}
