//go:build e2ecluster

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// services are the mesh's programs, as `make build` builds them; each runs
// from its own binary.
var services = []string{"modelgateway", "orchestrator", "vision", "indexer", "classifier", "sqlagent", "gateway"}

// binaries are the programs the cluster runs.
type binaries struct {
	natsServer, ferretdb string
	// service maps a service name to its binary.
	service map[string]string
}

// repoRoot is the workspace root: the test runs in cmd/agentmesh/e2e/cluster.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("no go.work at %s: the suite runs from cmd/agentmesh/e2e/cluster", root)
	}
	return root
}

// buildBinaries finds or builds every program. nats-server and ferretdb are
// built at the versions the workspace pins (go list -m), outside the
// workspace so that their own go.mod decides their dependencies and nothing
// of ours is rewritten, and cached by version between runs. The services
// come from E2ECLUSTER_BIN_DIR when set (`make e2e-cluster` points it at
// `make build`'s bin/), else they are built here.
func buildBinaries(t *testing.T) binaries {
	t.Helper()
	root := repoRoot(t)
	cache := filepath.Join(os.TempDir(), "agentmesh-e2e-cluster-cache")
	if err := os.MkdirAll(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	b := binaries{service: map[string]string{}}
	start := time.Now()
	natsVersion := pinnedVersion(t, root, "github.com/nats-io/nats-server/v2")
	b.natsServer = cached(t, filepath.Join(cache, "nats-server-"+natsVersion), "nats-server", func(dir string) error {
		return run(root, []string{"GOWORK=off", "GOBIN=" + dir}, "go", "install", "github.com/nats-io/nats-server/v2@"+natsVersion)
	})
	ferretVersion := pinnedVersion(t, root, "github.com/FerretDB/FerretDB")
	b.ferretdb = cached(t, filepath.Join(cache, "ferretdb-"+ferretVersion), "ferretdb", func(dir string) error {
		return buildFerretDB(root, ferretVersion, filepath.Join(dir, "ferretdb"))
	})
	binDir := os.Getenv("E2ECLUSTER_BIN_DIR")
	if binDir == "" {
		binDir = t.TempDir()
		args := []string{"build", "-o", binDir + "/"}
		for _, s := range services {
			if s == "gateway" {
				args = append(args, "./gateway")
			} else {
				args = append(args, "./services/"+s)
			}
		}
		if err := run(root, nil, "go", args...); err != nil {
			t.Fatalf("building the services: %v", err)
		}
	}
	for _, s := range services {
		p := filepath.Join(binDir, s)
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("service binary %s: %v (E2ECLUSTER_BIN_DIR=%q)", s, err, os.Getenv("E2ECLUSTER_BIN_DIR"))
		}
		b.service[s] = p
	}
	t.Logf("binaries ready in %v: nats-server %s, ferretdb %s, services from %s",
		time.Since(start).Round(time.Millisecond), natsVersion, ferretVersion, binDir)
	return b
}

// pinnedVersion is the version of module the workspace builds with.
func pinnedVersion(t *testing.T, root, module string) string {
	t.Helper()
	out, err := exec.Command("go", "-C", root, "list", "-m", "-f", "{{.Version}}", module).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", module, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		t.Fatalf("go list -m %s: no version", module)
	}
	return v
}

// cached returns dir/name, building it with build(tmp) into a temporary
// directory renamed into place when it is missing, so an interrupted build
// never leaves half a binary behind.
func cached(t *testing.T, dir, name string, build func(tmp string) error) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".tmp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := build(tmp); err != nil {
		t.Fatalf("building %s: %v", name, err)
	}
	if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
		if _, statErr := os.Stat(p); statErr != nil { // another run may have won the race
			t.Fatalf("caching %s: %v", name, err)
		}
	}
	return p
}

// buildFerretDB builds FerretDB's own command at version. Built as its own
// main module it insists on build/version/version.txt, which the module
// zip leaves empty (`bin/task gen-version` writes it in their repository),
// so the build runs on a copy of the module with that file written.
func buildFerretDB(root, version, bin string) error {
	out, err := exec.Command("go", "-C", root, "list", "-m", "-f", "{{.Dir}}", "github.com/FerretDB/FerretDB").Output()
	if err != nil {
		return fmt.Errorf("go list -m FerretDB: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return fmt.Errorf("FerretDB %s is not in the module cache (go mod download)", version)
	}
	src, err := os.MkdirTemp("", "agentmesh-ferretdb-src-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := run("", nil, "cp", "-R", dir+"/.", src); err != nil {
		return err
	}
	if err := run("", nil, "chmod", "-R", "u+w", src); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "build", "version", "version.txt"), []byte(version+"\n"), 0o644); err != nil {
		return err
	}
	return run(src, []string{"GOWORK=off", "GOFLAGS=-mod=mod"}, "go", "build", "-o", bin, "./cmd/ferretdb")
}

// run runs a command in dir with env added, returning its output in the
// error when it fails.
func run(dir string, env []string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}
