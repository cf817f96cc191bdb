//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// playwrightVersion is the playwright-core the console check runs on.
const playwrightVersion = "1.64.1"

// TestConsoleInABrowser drives the web console (gateway /console/) in
// headless Chromium against the whole mesh on the simulator provider:
// overview, a streamed chat turn, ingest and search, a classification run
// through both approvals, an SQL job confirmed before it runs, and analyses
// drawn as timelines, one finished and one cancelled (console.mjs). Around
// each action it checks what people rely on: links that restore the view
// after a reload and through back and forward, lists filled, filtered and
// paged, the busy state while work runs, results rendered rather than raw
// JSON, durations in human units. Screenshots go to E2E_OUTPUT_DIR/console
// (default: .agentmesh/e2e/console at the repository's root, beside make
// run's data, ignored by git and removed by make clean). It needs Chromium (Debian package chromium, or CHROMIUM=path)
// and npm to fetch playwright-core; without them it skips.
func TestConsoleInABrowser(t *testing.T) {
	chromium := os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium, _ = exec.LookPath("chromium")
	}
	npm, npmErr := exec.LookPath("npm")
	node, nodeErr := exec.LookPath("node")
	if chromium == "" || npmErr != nil || nodeErr != nil {
		t.Skip("needs chromium (apt install chromium), node and npm")
	}
	dir := t.TempDir()
	install := exec.Command(npm, "install", "--prefix", dir, "--no-audit", "--no-fund", "playwright-core@"+playwrightVersion)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm install playwright-core: %v\n%s", err, out)
	}
	script, err := os.ReadFile("console.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console.mjs"), script, 0o644); err != nil {
		t.Fatal(err)
	}

	// Paced like a model, so a job can be cancelled while it runs and a
	// streamed answer is seen growing before it ends.
	m := startUp(t, t.TempDir(), "MODELGATEWAY_PROVIDER=sim", "MODELGATEWAY_SIM_LATENCY=300ms", "MODELGATEWAY_SIM_CHUNK_DELAY=40ms")
	shots, err := consoleOutputDir()
	if err != nil {
		t.Fatal(err)
	}
	run := exec.Command(node, filepath.Join(dir, "console.mjs"))
	run.Env = append(os.Environ(), "BASE="+m.gateway, "CHROMIUM="+chromium, "SHOTS="+shots)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("console check: %v\n%s", err, out)
	}
	t.Logf("%s(screenshots in %s)", out, shots)
}

// consoleOutputDir is where the screenshots go: kept after the test, unlike
// t.TempDir, at a path known in advance so they can be looked at after a
// passing make e2e (which prints no test logs).
func consoleOutputDir() (string, error) {
	out := os.Getenv("E2E_OUTPUT_DIR")
	if out == "" {
		out = filepath.Join("..", "..", "..", ".agentmesh", "e2e") // the test runs in cmd/agentmesh/e2e
	}
	dir, err := filepath.Abs(filepath.Join(out, "console"))
	if err != nil {
		return "", err
	}
	return dir, os.MkdirAll(dir, 0o755)
}
