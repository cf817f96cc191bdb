package connections

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// SharedData returns the path of rel under shared/data, looked for in the
// directories above the package (the data sits beside the repository), or
// skips the test when it is not there.
func SharedData(t *testing.T, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "shared", "data", rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skipf("shared/data/%s not found above the package directory", rel)
		}
		dir = parent
	}
}

// ChinookCopy copies the shared Chinook SQLite file into a directory of its
// own (the shared file is never opened) and returns the copy's path.
func ChinookCopy(t *testing.T) string {
	t.Helper()
	in, err := os.Open(SharedData(t, filepath.Join("chinook", "Chinook_Sqlite.sqlite")))
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	dst := filepath.Join(t.TempDir(), "chinook.sqlite")
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dst
}

// Words, Stem and ContainsWord are the question matching's pieces.
var Words, Stem, ContainsWord = words, stem, containsWord
