package main

import (
	"sort"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Image is one service image: which Go package becomes its binary and what
// its configuration says about it.
type Image struct {
	// Name is the binary name, the image's title and the last element of
	// its repository (agentmesh/<Name>).
	Name string
	// Package is the main package, relative to the repository root.
	Package string
	// Description becomes org.opencontainers.image.description.
	Description string
	// Ports are the ports the service listens on by default, such as "9090/tcp".
	Ports []string
	// Tools are programs the service runs, from the build machine's
	// Debian packages (with their libraries); none for most.
	Tools Tools
}

// images are the images `make images` builds, one per service binary. The
// Dockerfile at the repository root has one target per entry; the tests hold
// the two to the same binaries, user, entrypoints, ports and labels.
//
// The agentmesh CLI has no image: it is a client and the one-process laptop
// runner (embedded FerretDB and NATS in single-writer mode), not a form the
// mesh is deployed in, and an image of it would invite running that mode in
// a cluster.
var images = []Image{
	{Name: "gateway", Package: "./gateway", Description: "agentmesh REST and SSE gateway, OpenAPI and web console", Ports: []string{"8080/tcp"}},
	{Name: "modelgateway", Package: "./services/modelgateway", Description: "agentmesh model gateway: every LLM and embedding call, routed to providers with retries and fallbacks", Ports: servicePorts},
	{Name: "orchestrator", Package: "./services/orchestrator", Description: "agentmesh orchestrator: the agentic chat loop and analysis jobs", Ports: servicePorts},
	{Name: "vision", Package: "./services/vision", Description: "agentmesh vision service: two-stage image analysis", Ports: servicePorts},
	{Name: "indexer", Package: "./services/indexer", Description: "agentmesh indexer: document intake, extracts, hybrid search and the knowledge graph", Ports: servicePorts,
		Tools: pdfTools},
	{Name: "classifier", Package: "./services/classifier", Description: "agentmesh classifier: classification runs with human approvals and checkpoints", Ports: servicePorts},
	{Name: "sqlagent", Package: "./services/sqlagent", Description: "agentmesh SQL agent: plain-English database jobs, confirmed before SQL runs", Ports: servicePorts},
}

// pdfTools are poppler-utils' pdftotext and pdftoppm, which the indexer
// finds on PATH to read a PDF attachment's text and render its first
// pages for vision, with fontconfig's configuration and the DejaVu fonts
// (libfontconfig1's font dependency) that pdftoppm draws text with.
var pdfTools = Tools{
	Executables:  []string{"/usr/bin/pdftotext", "/usr/bin/pdftoppm"},
	DataPackages: []string{"fontconfig-config", "fonts-dejavu-core"},
}

// servicePorts are GRPC_ADDR's and METRICS_ADDR's default ports.
var servicePorts = []string{"9090/tcp", "9464/tcp"}

// The layout every image shares, the same in the Dockerfile.
const (
	// repository is the image repository prefix: agentmesh/<name>, as
	// deploy/k8s names them.
	repository = "agentmesh/"
	// binDir holds the one executable of an image.
	binDir = "/usr/local/bin/"
	// uid and gid are distroless's "nonroot": not root, and no user of a
	// typical host.
	uid = 65532
	gid = 65532
	// home is nonroot's home, owned by it: the working directory, so
	// relative data paths (INDEXER_DATA_DIR's default) are writable
	// where no volume is mounted.
	home = "/home/nonroot"
	// caFile is where Go's crypto/x509 looks first on Linux.
	caFile = "/etc/ssl/certs/ca-certificates.crt"
	// versionVar is set to the image version with -ldflags -X.
	versionVar = "github.com/agentmesh/agentmesh/libs/service.Version"
	// pathEnv is the PATH Docker's BuildKit and buildah give an image built
	// FROM scratch; imagebuild sets the same, so the two recipes agree.
	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// labelCA records where the CA certificates came from.
	labelCA = "dev.agentmesh.image.ca-certificates"
)

// Meta is what varies from one build to the next.
type Meta struct {
	// Version is the image tag and the services' reported version.
	Version string
	// Revision is the source commit.
	Revision string
	// Created is the image creation time; the commit time keeps builds of
	// one commit identical.
	Created time.Time
	// Source is the URL of the source repository.
	Source string
	// Licenses is an SPDX expression.
	Licenses string
	// CASource says where the CA certificate bundle came from.
	CASource string
}

// user is the image's USER: numeric, so the runtime needs no /etc/passwd
// lookup and Kubernetes' runAsNonRoot can verify it.
func user() string { return strconv.Itoa(uid) + ":" + strconv.Itoa(gid) }

// entrypoint is the image's ENTRYPOINT: the binary itself, no shell.
func (im Image) entrypoint() []string { return []string{binDir + im.Name} }

// labels are the image's org.opencontainers.image.* labels (also written as
// manifest annotations).
func (im Image) labels(m Meta) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       im.Name,
		"org.opencontainers.image.description": im.Description,
		"org.opencontainers.image.version":     m.Version,
		"org.opencontainers.image.revision":    m.Revision,
		"org.opencontainers.image.created":     m.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.source":      m.Source,
		"org.opencontainers.image.licenses":    m.Licenses,
		labelCA:                                m.CASource,
	}
}

// config is the image's runtime configuration.
func (im Image) config(m Meta) v1.Config {
	ports := map[string]struct{}{}
	for _, p := range im.Ports {
		ports[p] = struct{}{}
	}
	return v1.Config{
		User:         user(),
		Env:          []string{pathEnv},
		Entrypoint:   im.entrypoint(),
		WorkingDir:   home,
		ExposedPorts: ports,
		Labels:       im.labels(m),
	}
}

// packages returns the main packages of imgs, in order.
func packages(imgs []Image) []string {
	var out []string
	for _, im := range imgs {
		out = append(out, im.Package)
	}
	return out
}

// selectImages returns the images named in names (all when names is empty),
// or the unknown names.
func selectImages(names []string) ([]Image, []string) {
	if len(names) == 0 {
		return images, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	var out []Image
	for _, im := range images {
		if want[im.Name] {
			out = append(out, im)
			delete(want, im.Name)
		}
	}
	var unknown []string
	for n := range want {
		unknown = append(unknown, n)
	}
	sort.Strings(unknown)
	return out, unknown
}
