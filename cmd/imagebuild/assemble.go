package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/x509"
	"embed"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// rootfs holds the files the Dockerfile copies too: /etc/passwd and
// /etc/group naming root and nonroot, for tools that map ids to names.
//
//go:embed rootfs/etc/passwd rootfs/etc/group
var rootfs embed.FS

// entry is one file or directory of a layer.
type entry struct {
	name     string // path without a leading slash; directories end in /
	mode     int64
	uid, gid int
	data     []byte
}

// baseEntries are the files every image shares, in the order of the layer:
// passwd and group, the CA bundle (ca, PEM), nonroot's home and /tmp.
func baseEntries(ca []byte) ([]entry, error) {
	passwd, err := rootfs.ReadFile("rootfs/etc/passwd")
	if err != nil {
		return nil, err
	}
	group, err := rootfs.ReadFile("rootfs/etc/group")
	if err != nil {
		return nil, err
	}
	return []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: group},
		{name: "etc/passwd", mode: 0o644, data: passwd},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(caFile, "/"), mode: 0o644, data: ca},
		{name: "home/", mode: 0o755},
		{name: strings.TrimPrefix(home, "/") + "/", mode: 0o755, uid: uid, gid: gid},
		{name: "tmp/", mode: 0o1777},
	}, nil
}

// binaryEntries are the layer holding one service binary.
func binaryEntries(im Image, bin []byte) []entry {
	return []entry{
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: strings.TrimPrefix(binDir, "/") + im.Name, mode: 0o755, data: bin},
	}
}

// layer makes an OCI layer of entries, every one timestamped created, so
// the same inputs always give the same digest.
func layer(entries []entry, created time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created.Truncate(time.Second),
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression), tarball.WithCompressedCaching)
}

// toolsLayer is the layer of an image's Tools and what its history says.
type toolsLayer struct {
	layer     v1.Layer
	createdBy string
}

// newToolsLayer makes the layer of files (toolEntries' result) for t.
func newToolsLayer(t Tools, files toolFiles, created time.Time) (*toolsLayer, error) {
	l, err := layer(files.entries, created)
	if err != nil {
		return nil, err
	}
	return &toolsLayer{layer: l, createdBy: fmt.Sprintf("imagebuild: %s with %d shared libraries and the loader; %s (Debian: %s)",
		strings.Join(t.Executables, ", "), files.libs, strings.Join(t.DataPackages, ", "), strings.Join(files.packages, ", "))}, nil
}

// assemble builds the image of im for linux/arch on an empty base: the
// shared base layer, the layer of its tools (tools nil: none), then a
// layer with the binary.
func assemble(im Image, m Meta, arch string, base v1.Layer, tools *toolsLayer, bin []byte) (v1.Image, error) {
	binLayer, err := layer(binaryEntries(im, bin), m.Created)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: m.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := []mutate.Addendum{{Layer: base, History: v1.History{Created: created, CreatedBy: "imagebuild: /etc/passwd, /etc/group, " + caFile + " (" + m.CASource + "), " + home + ", /tmp"}}}
	if tools != nil {
		adds = append(adds, mutate.Addendum{Layer: tools.layer, History: v1.History{Created: created, CreatedBy: tools.createdBy}})
	}
	adds = append(adds, mutate.Addendum{Layer: binLayer, History: v1.History{Created: created, CreatedBy: "imagebuild: " + binDir + im.Name + " (CGO_ENABLED=0 go build " + strings.Join(goBuildFlags(m.Version), " ") + " " + im.Package + ")"}})
	img, err = mutate.Append(img, adds...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = created
	cf.Config = im.config(m)
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, im.labels(m)).(v1.Image), nil
}

// tag is the image's name as `docker load` and registries see it.
func (im Image) tag(version string) (name.Tag, error) {
	return name.NewTag(repository + im.Name + ":" + version)
}

// write stores img under out as an OCI image layout, out/<name>/, whose one
// manifest carries the version as its ref.name (skopeo's oci:DIR:TAG), and
// as a `docker save` tarball, out/<name>.tar, tagged agentmesh/<name>:<version>.
func write(img v1.Image, im Image, m Meta, arch, out string) error {
	tag, err := im.tag(m.Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, im.Name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": m.Version,
			"io.containerd.image.name":          tag.String(),
		}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}),
	)
	if err != nil {
		return fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	if err := tarball.WriteToFile(filepath.Join(out, im.Name+".tar"), tag, img); err != nil {
		return fmt.Errorf("tarball: %w", err)
	}
	return nil
}

// loadCA returns the CA bundle -ca names (caDebian: built from the
// machine's ca-certificates package; else a PEM file), a description of
// where it came from, and how many certificates it holds.
func loadCA(ca, dpkgRoot string) ([]byte, string, int, error) {
	var data []byte
	var source string
	if ca == caDebian {
		var err error
		if data, source, err = debianCA(dpkgRoot); err != nil {
			return nil, "", 0, err
		}
	} else {
		var err error
		if data, err = os.ReadFile(ca); err != nil {
			return nil, "", 0, fmt.Errorf("CA certificates: %w", err)
		}
		source = ca + " of the build machine"
	}
	n, err := countCerts(data)
	if err != nil {
		return nil, "", 0, fmt.Errorf("CA certificates from %s: %w", source, err)
	}
	return data, source, n, nil
}

// readCA returns how many certificates the PEM bundle at path holds.
func readCA(path string) (int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("CA certificates: %w", err)
	}
	return countCerts(data)
}

// countCerts returns how many certificates a PEM bundle holds; a bundle
// without one, or with one that does not parse, is an error, since TLS to
// every provider would fail.
func countCerts(data []byte) (int, error) {
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return 0, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		n++
	}
	if n == 0 {
		return 0, errors.New("no PEM certificate in it")
	}
	return n, nil
}
