package main

import (
	"strings"
	"testing"
	"time"
)

// TestUpHelpDoesNotStartTheMesh: `agentmesh up --help` (and -h, help)
// answers at once instead of starting the mesh, and an unknown argument is
// an error naming it.
func TestUpHelpDoesNotStartTheMesh(t *testing.T) {
	for _, args := range [][]string{{"up", "--help"}, {"up", "-h"}, {"up", "help"}, {"up", "--port=1"}} {
		done := make(chan error, 1)
		go func() { done <- run(args) }()
		select {
		case err := <-done:
			wantErr := args[1] == "--port=1"
			if (err != nil) != wantErr || wantErr && !strings.Contains(err.Error(), "--port=1") {
				t.Errorf("agentmesh %s: %v", strings.Join(args, " "), err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("agentmesh %s did not return: it started the mesh", strings.Join(args, " "))
		}
	}
}
