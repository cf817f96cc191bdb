package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli"
)

// TestUpHelpDoesNotStartTheMesh: `agentmesh up --help` (and -h, help up)
// answers at once with the help instead of starting the mesh, and an
// unknown argument or flag is a usage error naming it.
func TestUpHelpDoesNotStartTheMesh(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		contains string
	}{
		{[]string{"up", "--help"}, cli.ExitOK, "Runs the whole mesh"},
		{[]string{"up", "-h"}, cli.ExitOK, "Runs the whole mesh"},
		{[]string{"help", "up"}, cli.ExitOK, "Runs the whole mesh"},
		{[]string{"up", "--port=1"}, cli.ExitUsage, "--port"},
		{[]string{"up", "now"}, cli.ExitUsage, `"now"`},
	} {
		var out, errOut bytes.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(context.Background(), tc.args, cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errOut})
		}()
		select {
		case code := <-done:
			if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.contains) {
				t.Errorf("agentmesh %s: exit %d, want %d with %q in\n%s%s", strings.Join(tc.args, " "), code, tc.code, tc.contains, out.String(), errOut.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("agentmesh %s did not return: it started the mesh", strings.Join(tc.args, " "))
		}
	}
}
