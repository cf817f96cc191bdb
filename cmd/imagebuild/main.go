// Command imagebuild builds one OCI image per agentmesh service without a
// container engine: it compiles each binary static (CGO_ENABLED=0), refuses
// any that needs a libc or links the embedded infrastructure, and assembles
// it with go-containerregistry onto an empty base with the files a static Go
// service needs (the CA certificates of the build machine's Debian
// ca-certificates package, /etc/passwd naming the nonroot user 65532, a
// home and /tmp). No shell, no package manager. An image whose service
// runs programs (the indexer: poppler-utils for PDFs) also gets them, with
// their libraries and loader, from the build machine's Debian packages
// (tools.go).
//
//	go run ./cmd/imagebuild -version v1.2.3 -revision $(git rev-parse HEAD) [image...]
//
// Each image is written twice under -out: an OCI image layout, <name>/, and
// a `docker save` tarball, <name>.tar, tagged agentmesh/<name>:<version>.
// `make images` runs it with the version from git. The Dockerfile at the
// repository root builds the same images with Docker or BuildKit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// defaultSource and defaultLicenses are the -source and -licenses
// defaults; the Dockerfile states the same. The repository has no license
// file yet, hence SPDX's NOASSERTION.
const (
	defaultSource   = "https://github.com/agentmesh/agentmesh"
	defaultLicenses = "NOASSERTION"
)

// options are imagebuild's flags.
type options struct {
	repo, out          string
	version, revision  string
	created            int64
	source, licenses   string
	ca, caSource, arch string
	toolsOut           string
	names              []string
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", ".", "repository root (where go.work is)")
	flag.StringVar(&o.out, "out", "dist/images", "output directory")
	flag.StringVar(&o.version, "version", "dev", "image tag and the version the services report")
	flag.StringVar(&o.revision, "revision", "", "source commit, for org.opencontainers.image.revision")
	flag.Int64Var(&o.created, "created", epochFromEnv(), "image creation time in Unix seconds (default $SOURCE_DATE_EPOCH, else 0, so equal inputs give equal digests)")
	flag.StringVar(&o.source, "source", defaultSource, "source repository URL")
	flag.StringVar(&o.licenses, "licenses", defaultLicenses, "SPDX license expression")
	flag.StringVar(&o.ca, "ca", caDebian, `CA certificates to put in the images: "debian" (the certificates of this machine's ca-certificates package, without local additions) or a PEM file`)
	flag.StringVar(&o.caSource, "ca-source", "", "where the CA bundle comes from, for the "+labelCA+" label (default: the package version, or the -ca file)")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "GOARCH of the images (linux only)")
	flag.StringVar(&o.toolsOut, "tools-out", "", "only write the tools of the images named (e.g. the indexer's poppler-utils), collected as for an image, under `DIR`/<image>/, and build nothing (the Dockerfile copies them from there)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: imagebuild [flags] [image...]\n\nimages: %s (default all)\n\n", strings.Join(names(images), " "))
		flag.PrintDefaults()
	}
	flag.Parse()
	o.names = flag.Args()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// epochFromEnv reads SOURCE_DATE_EPOCH (reproducible-builds.org), 0 when
// unset or not a number.
func epochFromEnv() int64 {
	n, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// names returns the names of imgs.
func names(imgs []Image) []string {
	var out []string
	for _, im := range imgs {
		out = append(out, im.Name)
	}
	return out
}

// result is one written image, for the summary.
type result struct {
	tag, digest          string
	compressed, unpacked int64
}

// run builds the images o names and prints a line per image to stdout;
// the go build's output goes to log.
func run(ctx context.Context, o options, stdout, log io.Writer) error {
	imgs, unknown := selectImages(o.names)
	if len(unknown) > 0 {
		return fmt.Errorf("unknown images %v; known: %s", unknown, strings.Join(names(images), " "))
	}
	if o.toolsOut != "" {
		return writeTools(o.toolsOut, o.arch, imgs, stdout)
	}
	ca, caSource, ncerts, err := loadCA(o.ca, "/")
	if err != nil {
		return err
	}
	m := Meta{
		Version:  o.version,
		Revision: o.revision,
		Created:  time.Unix(o.created, 0).UTC(),
		Source:   o.source,
		Licenses: o.licenses,
		CASource: o.caSource,
	}
	if m.CASource == "" {
		m.CASource = caSource
	}
	for _, im := range imgs {
		if _, err := im.tag(m.Version); err != nil {
			return fmt.Errorf("-version %q is not a valid image tag: %w", m.Version, err)
		}
	}

	binDir, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	fmt.Fprintf(stdout, "building %d static binaries for linux/%s, version %s\n", len(imgs), o.arch, m.Version)
	if err := buildBinaries(ctx, o.repo, binDir, m.Version, o.arch, imgs, log); err != nil {
		return err
	}
	be, err := baseEntries(ca)
	if err != nil {
		return err
	}
	base, err := layer(be, m.Created)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "base layer: %d CA certificates from %s\n", ncerts, m.CASource)
	var results []result
	for _, im := range imgs {
		var tools *toolsLayer
		if len(im.Tools.Executables) > 0 {
			files, err := machineTools(im, o.arch)
			if err != nil {
				return err
			}
			if tools, err = newToolsLayer(im.Tools, files, m.Created); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s tools layer: %d files (%s)\n", im.Name, len(files.entries), strings.Join(files.packages, ", "))
		}
		r, err := buildOne(im, m, o.arch, base, tools, filepath.Join(binDir, im.Name), o.out)
		if err != nil {
			return fmt.Errorf("%s: %w", im.Name, err)
		}
		results = append(results, r)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "image\tdigest\tcompressed\tunpacked\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", r.tag, r.digest, mib(r.compressed), mib(r.unpacked))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	out, _ := filepath.Abs(o.out)
	fmt.Fprintf(stdout, "written to %s: <image>/ (OCI layout) and <image>.tar (docker load)\n", out)
	return nil
}

// writeTools writes the tools of each of imgs that has some under
// out/<name>/, as files with the layer's paths and modes.
func writeTools(out, arch string, imgs []Image, stdout io.Writer) error {
	for _, im := range imgs {
		if len(im.Tools.Executables) == 0 {
			continue
		}
		files, err := machineTools(im, arch)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, im.Name)
		for _, e := range files.entries {
			p := filepath.Join(dir, filepath.FromSlash(e.name))
			if strings.HasSuffix(e.name, "/") {
				err = os.MkdirAll(p, os.FileMode(e.mode))
			} else {
				err = os.WriteFile(p, e.data, os.FileMode(e.mode))
			}
			if err != nil {
				return err
			}
		}
		fmt.Fprintf(stdout, "%s: %d tool files under %s (%s)\n", im.Name, len(files.entries), dir, strings.Join(files.packages, ", "))
	}
	return nil
}

// machineTools collects im's Tools from this machine's Debian packages,
// which only serve images of its own architecture.
func machineTools(im Image, arch string) (toolFiles, error) {
	if arch != runtime.GOARCH {
		return toolFiles{}, fmt.Errorf("%s: its tools come from this machine's Debian packages, which are %s, not %s", im.Name, runtime.GOARCH, arch)
	}
	files, err := toolEntries("/", arch, im.Tools)
	if err != nil {
		return toolFiles{}, fmt.Errorf("%s: %w (install the Debian packages: apt-get install poppler-utils)", im.Name, err)
	}
	return files, nil
}

// buildOne assembles and writes one image from its binary at binPath.
func buildOne(im Image, m Meta, arch string, base v1.Layer, tools *toolsLayer, binPath, out string) (result, error) {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return result{}, err
	}
	img, err := assemble(im, m, arch, base, tools, bin)
	if err != nil {
		return result{}, err
	}
	if err := write(img, im, m, arch, out); err != nil {
		return result{}, err
	}
	tag, _ := im.tag(m.Version)
	r := result{tag: tag.String()}
	d, err := img.Digest()
	if err != nil {
		return result{}, err
	}
	r.digest = d.Algorithm + ":" + d.Hex[:12]
	r.compressed, r.unpacked, err = sizes(img)
	return r, err
}

// sizes returns the bytes a registry stores for img (manifest, config and
// compressed layers) and the bytes of its unpacked layers.
func sizes(img v1.Image) (compressed, unpacked int64, err error) {
	raw, err := img.RawManifest()
	if err != nil {
		return 0, 0, err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return 0, 0, err
	}
	compressed = int64(len(raw) + len(cfg))
	layers, err := img.Layers()
	if err != nil {
		return 0, 0, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, 0, err
		}
		compressed += n
		rc, err := l.Uncompressed()
		if err != nil {
			return 0, 0, err
		}
		u, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return 0, 0, err
		}
		unpacked += u
	}
	return compressed, unpacked, nil
}

// mib formats n bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
