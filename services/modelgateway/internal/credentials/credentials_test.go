package credentials_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/credentials"
)

func TestLoadRotatesAndScrubs(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(file, []byte("sk-c\nsk-d,sk-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := credentials.Load(" sk-a , sk-b", file)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := 0; i < 8; i++ {
		got = append(got, r.Next())
	}
	if strings.Join(got, " ") != "sk-a sk-b sk-c sk-d sk-a sk-b sk-c sk-d" {
		t.Errorf("order %v", got)
	}
	if s := r.Scrub("bad key sk-b and sk-d"); s != "bad key [REDACTED] and [REDACTED]" {
		t.Errorf("scrubbed %q", s)
	}
	if s := fmt.Sprint(r); strings.Contains(s, "sk-") {
		t.Errorf("String shows keys: %s", s)
	}
}

func TestLoadMissingFileNamesTheFileNotTheKeys(t *testing.T) {
	t.Parallel()
	_, err := credentials.Load("sk-secret", "/nonexistent/keys")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/keys") || strings.Contains(err.Error(), "sk-secret") {
		t.Errorf("err %v", err)
	}
	var none *credentials.KeyRing
	if none.Next() != "" || none.Scrub("x") != "x" {
		t.Error("nil ring")
	}
}
