package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A shared server's directory left by a test binary that has exited is
// removed when the next one starts; a live process's, and any other name,
// stay.
func TestStaleSharedDirsAreRemoved(t *testing.T) {
	t.Parallel()
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	const prefix = "agentmesh-testkit-mongo-"
	dead := fmt.Sprintf("%s%d-123", prefix, exited.Process.Pid)
	live := fmt.Sprintf("%s%d-456", prefix, os.Getpid())
	others := []string{prefix + "789", prefix + "x-1", "other-dir"}
	for _, name := range append([]string{dead, live}, others...) {
		if err := os.MkdirAll(filepath.Join(tmp, name, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleDirs(tmp, prefix)
	if _, err := os.Stat(filepath.Join(tmp, dead)); !os.IsNotExist(err) {
		t.Errorf("the exited process's directory is still there (%v)", err)
	}
	for _, name := range append([]string{live}, others...) {
		if _, err := os.Stat(filepath.Join(tmp, name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}
