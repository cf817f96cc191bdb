package main

import (
	"archive/tar"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

var testMeta = Meta{
	Version:  "v1.2.3-4-gabcdef0",
	Revision: "abcdef0123456789abcdef0123456789abcdef01",
	Created:  time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC),
	Source:   defaultSource,
	Licenses: defaultLicenses,
	CASource: "Debian ca-certificates 20230311+deb12u1",
}

// testImage assembles im from a fake binary, for tests that look at the
// image, not at what runs in it.
func testImage(t *testing.T, im Image, m Meta, bin string) v1.Image {
	t.Helper()
	be, err := baseEntries([]byte("-----BEGIN CERTIFICATE-----\n"))
	if err != nil {
		t.Fatal(err)
	}
	base, err := layer(be, m.Created)
	if err != nil {
		t.Fatal(err)
	}
	img, err := assemble(im, m, "amd64", base, nil, []byte(bin))
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// readBack writes img as imagebuild does and returns it read back.
func readBack(t *testing.T, img v1.Image, im Image) v1.Image {
	t.Helper()
	out := t.TempDir()
	if err := write(img, im, testMeta, "amd64", out); err != nil {
		t.Fatal(err)
	}
	got, _ := loadWritten(t, out, im, testMeta.Version)
	return got
}

// loadWritten reads im back from both of write's outputs under out: from
// the OCI layout, the image whose ref.name is version (as skopeo's
// oci:DIR:TAG finds it), and from the docker tarball, the one tagged
// agentmesh/<name>:<version> (as docker load names it). It validates each
// (digests, sizes and diff ids agree), checks they hold the same config and
// layers, and returns the layout's image and its index descriptor.
func loadWritten(t *testing.T, out string, im Image, version string) (v1.Image, v1.Descriptor) {
	t.Helper()
	idx, err := layout.ImageIndexFromPath(filepath.Join(out, im.Name))
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: the OCI layout holds %d manifests, want 1", im.Name, len(m.Manifests))
	}
	d := m.Manifests[0]
	if d.Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("%s: the OCI layout's image is named %q, want %q", im.Name, d.Annotations["org.opencontainers.image.ref.name"], version)
	}
	img, err := idx.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("%s: OCI layout image: %v", im.Name, err)
	}

	tag, err := name.NewTag(repository + im.Name + ":" + version)
	if err != nil {
		t.Fatal(err)
	}
	fromTar, err := tarball.ImageFromPath(filepath.Join(out, im.Name+".tar"), &tag)
	if err != nil {
		t.Fatalf("%s: the docker tarball has no image tagged %s: %v", im.Name, tag, err)
	}
	if err := validate.Image(fromTar); err != nil {
		t.Fatalf("%s: docker tarball image: %v", im.Name, err)
	}
	a, _ := img.ConfigName()
	b, _ := fromTar.ConfigName()
	if a != b {
		t.Errorf("%s: the layout and the tarball hold different images (config %s, %s)", im.Name, a, b)
	}
	return img, d
}

// files lists img's flattened root filesystem as "mode uid:gid path size".
func files(t *testing.T, img v1.Image) []string {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%v %d:%d /%s %d", h.FileInfo().Mode(), h.Uid, h.Gid, h.Name, h.Size))
	}
}

// TestAssembledImage checks an image's whole root filesystem, its runtime
// configuration and its labels, as a runtime and a registry see them.
func TestAssembledImage(t *testing.T) {
	t.Parallel()
	im := images[3] // vision
	img := readBack(t, testImage(t, im, testMeta, "binary"), im)

	passwd, _ := os.ReadFile("rootfs/etc/passwd")
	group, _ := os.ReadFile("rootfs/etc/group")
	want := []string{
		"drwxr-xr-x 0:0 /etc 0",
		fmt.Sprintf("-rw-r--r-- 0:0 /etc/group %d", len(group)),
		fmt.Sprintf("-rw-r--r-- 0:0 /etc/passwd %d", len(passwd)),
		"drwxr-xr-x 0:0 /etc/ssl 0",
		"drwxr-xr-x 0:0 /etc/ssl/certs 0",
		"-rw-r--r-- 0:0 /etc/ssl/certs/ca-certificates.crt 28",
		"drwxr-xr-x 0:0 /home 0",
		"drwxr-xr-x 65532:65532 /home/nonroot 0",
		"dtrwxrwxrwx 0:0 /tmp 0",
		"drwxr-xr-x 0:0 /usr 0",
		"drwxr-xr-x 0:0 /usr/local 0",
		"drwxr-xr-x 0:0 /usr/local/bin 0",
		"-rwxr-xr-x 0:0 /usr/local/bin/vision 6",
	}
	// mutate.Extract lists the top layer first: sort by path.
	got := files(t, img)
	sort.Slice(got, func(i, j int) bool { return strings.Fields(got[i])[2] < strings.Fields(got[j])[2] })
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("root filesystem (-want +got):\n%s", diff)
	}
	if !strings.Contains(string(passwd), "nonroot:x:65532:65532:") || !strings.Contains(string(group), "nonroot:x:65532:") {
		t.Errorf("/etc/passwd or /etc/group does not name nonroot as 65532:\n%s%s", passwd, group)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg := v1.Config{
		User:         "65532:65532",
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint:   []string{"/usr/local/bin/vision"},
		WorkingDir:   "/home/nonroot",
		ExposedPorts: map[string]struct{}{"9090/tcp": {}, "9464/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "vision",
			"org.opencontainers.image.description": im.Description,
			"org.opencontainers.image.version":     "v1.2.3-4-gabcdef0",
			"org.opencontainers.image.revision":    "abcdef0123456789abcdef0123456789abcdef01",
			"org.opencontainers.image.created":     "2026-11-25T10:00:00Z",
			"org.opencontainers.image.source":      "https://github.com/agentmesh/agentmesh",
			"org.opencontainers.image.licenses":    "NOASSERTION",
			"dev.agentmesh.image.ca-certificates":  "Debian ca-certificates 20230311+deb12u1",
		},
	}
	if diff := cmp.Diff(wantCfg, cf.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" || !cf.Created.Equal(testMeta.Created) {
		t.Errorf("config platform/created = %s/%s %v, want linux/amd64 %v", cf.OS, cf.Architecture, cf.Created, testMeta.Created)
	}
	if len(cf.History) != 2 || !strings.Contains(cf.History[1].CreatedBy, "CGO_ENABLED=0 go build") {
		t.Errorf("history does not say how the binary was built: %+v", cf.History)
	}
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCfg.Labels, mf.Annotations); diff != "" {
		t.Errorf("manifest annotations (-want +got):\n%s", diff)
	}
	if mf.MediaType != "application/vnd.oci.image.manifest.v1+json" || mf.Config.MediaType != "application/vnd.oci.image.config.v1+json" {
		t.Errorf("media types %s, %s: want OCI's", mf.MediaType, mf.Config.MediaType)
	}
}

// TestAssembleIsReproducible checks that equal inputs give equal digests,
// and that each input that should change the image does.
func TestAssembleIsReproducible(t *testing.T) {
	t.Parallel()
	digest := func(im Image, m Meta, bin string) v1.Hash {
		d, err := testImage(t, im, m, bin).Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	ref := digest(images[0], testMeta, "binary")
	if again := digest(images[0], testMeta, "binary"); again != ref {
		t.Errorf("same inputs, different digests: %s, %s", ref, again)
	}
	later := testMeta
	later.Created = later.Created.Add(time.Second)
	otherVersion := testMeta
	otherVersion.Version = "v1.2.4"
	for name, d := range map[string]v1.Hash{
		"another binary":  digest(images[0], testMeta, "binary2"),
		"another image":   digest(images[1], testMeta, "binary"),
		"another time":    digest(images[0], later, "binary"),
		"another version": digest(images[0], otherVersion, "binary"),
	} {
		if d == ref {
			t.Errorf("%s gives the same digest %s", name, d)
		}
	}
}

// TestWriteLayoutAndTarball reads back both outputs of a write made
// twice: one image in each, under its version and tag, for linux/amd64.
func TestWriteLayoutAndTarball(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	im := images[0]
	img := testImage(t, im, testMeta, "binary")
	if err := write(img, im, testMeta, "amd64", out); err != nil {
		t.Fatal(err)
	}
	// A second write replaces the first rather than adding to it.
	if err := write(img, im, testMeta, "amd64", out); err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	got, d := loadWritten(t, out, im, testMeta.Version)
	if d.Annotations["io.containerd.image.name"] != "agentmesh/gateway:"+testMeta.Version {
		t.Errorf("layout descriptor annotations = %v", d.Annotations)
	}
	if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != "amd64" {
		t.Errorf("layout descriptor platform = %v", d.Platform)
	}
	if gd, _ := got.Digest(); gd != want {
		t.Errorf("layout image digest %s, want %s", gd, want)
	}
}

// TestCheckStatic runs the static-binary guard on real files: a static Go
// binary passes; a dynamically linked executable of this machine and a
// file that is not ELF do not.
func TestCheckStatic(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("ELF binaries: Linux only")
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	cmd := exec.Command("go", "build", "-trimpath", "-o", static, "./testdata/static")
	cmd.Env = append(os.Environ(), goBuildEnv(runtime.GOARCH)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := checkStatic(static); err != nil {
		t.Errorf("checkStatic(static Go binary) = %v, want nil", err)
	}
	if err := checkStatic("rootfs/etc/passwd"); err == nil || !strings.Contains(err.Error(), "not an ELF") {
		t.Errorf("checkStatic(text file) = %v, want 'not an ELF'", err)
	}
	// A C program from this machine's libc: it has an interpreter.
	for _, p := range []string{"/bin/true", "/usr/bin/true"} {
		f, err := os.Stat(p)
		if err != nil || !f.Mode().IsRegular() {
			continue
		}
		if err := checkStatic(p); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("checkStatic(%s) = %v, want 'dynamically linked'", p, err)
		}
		return
	}
	t.Log("no /bin/true on this machine: the dynamic case was not tried")
}

// TestCheckBuildInfo feeds the guard the build information of binaries it
// must refuse: cgo on, built for another OS, linking embedded
// infrastructure.
func TestCheckBuildInfo(t *testing.T) {
	t.Parallel()
	info := func(settings map[string]string, deps ...string) *buildinfo.BuildInfo {
		bi := &buildinfo.BuildInfo{}
		for k, v := range settings {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: k, Value: v})
		}
		for _, d := range deps {
			bi.Deps = append(bi.Deps, &debug.Module{Path: d, Version: "v1.0.0"})
		}
		return bi
	}
	ok := map[string]string{"CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"}
	tests := []struct {
		name    string
		info    *buildinfo.BuildInfo
		wantErr string
	}{
		{"static service", info(ok, "go.mongodb.org/mongo-driver/v2", "github.com/nats-io/nats.go", "modernc.org/sqlite"), ""},
		{"cgo on", info(map[string]string{"CGO_ENABLED": "1", "GOOS": "linux"}), `CGO_ENABLED="1"`},
		{"cgo unstated", info(map[string]string{"GOOS": "linux"}), `CGO_ENABLED=""`},
		{"darwin", info(map[string]string{"CGO_ENABLED": "0", "GOOS": "darwin"}), `GOOS="darwin"`},
		{"FerretDB", info(ok, "github.com/FerretDB/FerretDB"), "links github.com/FerretDB/FerretDB"},
		{"nats-server", info(ok, "github.com/nats-io/nats-server/v2"), "links github.com/nats-io/nats-server/v2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBuildInfo(tc.info)
			if tc.wantErr == "" {
				if err != nil {
					t.Errorf("checkBuildInfo = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("checkBuildInfo = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestReadCA checks the CA bundle guard: an image without a usable bundle
// could not reach any provider over TLS.
func TestReadCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"missing", filepath.Join(dir, "none.crt"), "no such file"},
		{"empty", write("empty.crt", ""), "no PEM certificate"},
		{"a key, no certificate", write("key.pem", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"), "no PEM certificate"},
		{"corrupt certificate", write("bad.crt", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "certificate 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readCA(tc.path)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("readCA = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
