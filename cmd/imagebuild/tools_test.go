package main

import (
	"crypto/md5"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestPDFToolsAreSelfContained collects the indexer's tools from this
// machine's Debian packages (CI installs poppler-utils) and writes them
// into a directory: there the dynamic loader they name resolves every
// library they need from the directory alone, and pdftotext and pdftoppm
// run.
func TestPDFToolsAreSelfContained(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/pdftoppm"); err != nil || multiarch[runtime.GOARCH] == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("poppler-utils not installed, and CI is set: .ci/run installs it")
		}
		t.Skip("poppler-utils (Debian) is not installed")
	}
	files, err := toolEntries("/", runtime.GOARCH, pdfTools)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var names []string
	for _, e := range files.entries {
		names = append(names, e.name)
		p := filepath.Join(dir, e.name)
		if strings.HasSuffix(e.name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, e.data, os.FileMode(e.mode)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"usr/bin/pdftotext", "usr/bin/pdftoppm", "etc/fonts/fonts.conf", "usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among the %d files", want, len(names))
		}
	}
	if files.libs < 5 || !slices.ContainsFunc(files.packages, func(p string) bool { return strings.HasPrefix(p, "poppler-utils ") }) {
		t.Errorf("%d libraries from %v: want poppler's", files.libs, files.packages)
	}
	loader := filepath.Join(dir, "lib64/ld-linux-x86-64.so.2")
	if runtime.GOARCH == "arm64" {
		loader = filepath.Join(dir, "lib/ld-linux-aarch64.so.1")
	}
	libs := filepath.Join(dir, "lib", multiarch[runtime.GOARCH])
	for _, tool := range []string{"pdftotext", "pdftoppm"} {
		bin := filepath.Join(dir, "usr/bin", tool)
		out, err := exec.Command(loader, "--inhibit-cache", "--library-path", libs, "--list", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("%s --list %s: %v\n%s", loader, tool, err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if _, resolved, ok := strings.Cut(line, "=> "); ok && !strings.HasPrefix(resolved, dir) {
				t.Errorf("%s: %s: resolved outside the collected files", tool, strings.TrimSpace(line))
			}
		}
		if out, err := exec.Command(loader, "--inhibit-cache", "--library-path", libs, bin, "-v").CombinedOutput(); err != nil {
			t.Errorf("%s -v: %v\n%s", tool, err, out)
		}
	}
}

// TestToolsRefuseFilesDpkgDoesNotVouchFor: a file that differs from its
// package's md5sum, or that no package ships, stops the collection.
func TestToolsRefuseFilesDpkgDoesNotVouchFor(t *testing.T) {
	t.Parallel()
	font := []byte("not really a font")
	sum := md5.Sum(font)
	for _, tc := range []struct {
		name, md5sums, want string
		extra               string // a file listed but not in md5sums
	}{
		{name: "as packaged", md5sums: hex.EncodeToString(sum[:]) + "  usr/share/fonts/x.ttf\n"},
		{name: "changed on the machine", md5sums: strings.Repeat("0", 32) + "  usr/share/fonts/x.ttf\n", want: "differs from package fonts-x's"},
		{name: "no md5sum", md5sums: hex.EncodeToString(sum[:]) + "  usr/share/fonts/x.ttf\n", extra: "usr/share/fonts/stray.ttf", want: "belongs to no installed Debian package"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			write := func(p, data string) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("usr/share/fonts/x.ttf", string(font))
			list := "/.\n/usr\n/usr/share\n/usr/share/fonts\n/usr/share/fonts/x.ttf\n/usr/share/doc/fonts-x/copyright\n"
			write("usr/share/doc/fonts-x/copyright", "docs are left out")
			if tc.extra != "" {
				write(tc.extra, "stray")
				list += "/" + tc.extra + "\n"
			}
			write("var/lib/dpkg/info/fonts-x.list", list)
			write("var/lib/dpkg/info/fonts-x.md5sums", tc.md5sums)
			write("var/lib/dpkg/status", "Package: fonts-x\nStatus: install ok installed\nVersion: 1.0-1\n\n")
			files, err := toolEntries(root, "amd64", Tools{DataPackages: []string{"fonts-x"}})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("error %v, want one saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range files.entries {
				names = append(names, e.name)
			}
			if !slices.Equal(names, []string{"usr/", "usr/share/", "usr/share/fonts/", "usr/share/fonts/x.ttf"}) || !slices.Equal(files.packages, []string{"fonts-x 1.0-1"}) {
				t.Errorf("entries %v, packages %v", names, files.packages)
			}
		})
	}
}
