//go:build images

// The test in this file builds every image as `make images` does, unpacks
// each one's root filesystem and runs its entrypoint there, chrooted, as
// the image's user, with only environment variables: it needs root and
// builds seven static binaries, so it runs under `make images-test`
// (go test -tags images), not `make test`.

package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// startTimeout bounds how long a container may take to serve.
const startTimeout = 60 * time.Second

// TestImagesRunFromTheirRootFilesystem builds all images, checks what is in
// each (a static binary, CA certificates, no shell), then runs each image's
// entrypoint chrooted into its unpacked root filesystem as the image's
// user, with environment variables pointing at NATS and FerretDB on
// loopback: every service must serve grpc.health.v1 SERVING, and the
// gateway /livez, and /readyz once it sees all six services SERVING. Then
// each must stop cleanly on SIGTERM.
func TestImagesRunFromTheirRootFilesystem(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("chroot and ELF: Linux only")
	}
	if os.Geteuid() != 0 {
		t.Skip("running an image's entrypoint in its root filesystem needs chroot, which needs root (CAP_SYS_CHROOT)")
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	const version = "v0.0.0-imagetest"
	o := options{
		repo: repo, out: out, version: version, revision: "imagetest", created: 1_700_000_000,
		source: defaultSource, licenses: defaultLicenses, ca: caDebian, arch: runtime.GOARCH,
	}
	if _, err := os.Stat("/var/lib/dpkg/info/ca-certificates.md5sums"); err != nil {
		o.ca = caFile // not Debian: the machine's bundle, as -ca FILE would
	}
	var stdout, log bytes.Buffer
	started := time.Now()
	if err := run(context.Background(), o, &stdout, &log); err != nil {
		t.Fatalf("imagebuild: %v\n%s", err, log.String())
	}
	t.Logf("built in %v:\n%s", time.Since(started).Round(time.Second), stdout.String())

	// Unpack and inspect every image before running any.
	roots := map[string]string{}
	configs := map[string]v1.Config{}
	for _, im := range images {
		img, _ := loadWritten(t, out, im, version)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		configs[im.Name] = cf.Config
		roots[im.Name] = unpack(t, img)
		inspectRootfs(t, im, roots[im.Name], cf.Config)
		devNull(t, roots[im.Name])
	}

	nats := testkit.NewNATS(t)
	mongoURI, db := testkit.MongoURI(t)
	env := []string{
		"GRPC_ADDR=127.0.0.1:0",
		"METRICS_ADDR=127.0.0.1:0",
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=json",
		"MONGO_URI=" + mongoURI,
		"MONGO_DATABASE=" + db,
		"NATS_URL=" + nats.URL(),
		// The built-in simulator: nothing here can reach a model provider.
		"MODELGATEWAY_PROVIDER=sim",
	}

	var running []*container
	stopAll := func() {
		for i := len(running) - 1; i >= 0; i-- {
			running[i].kill()
		}
	}
	t.Cleanup(stopAll)
	// Each service learns the addresses of those started before it, as
	// the gateway learns all six.
	for _, n := range []string{"modelgateway", "vision", "indexer", "orchestrator", "classifier", "sqlagent"} {
		c := start(t, n, roots[n], configs[n], env)
		running = append(running, c)
		env = append(env, strings.ToUpper(n)+"_ADDR="+c.addr)
	}
	for _, c := range running {
		waitServing(t, c)
	}
	gw := start(t, "gateway", roots["gateway"], configs["gateway"], env)
	running = append(running, gw)
	for _, path := range []string{"/livez", "/readyz"} {
		var last note
		testkit.Eventually(t, startTimeout, func() bool {
			code, body := get("http://" + gw.addr + path)
			last.s = fmt.Sprintf("%d %s", code, body)
			return code == http.StatusOK
		}, "gateway %s: last answer %s\n%s", path, &last, gw)
		t.Logf("gateway %s: %s", path, last.s)
	}

	for _, c := range running {
		c.checkProcess(t)
	}
	for _, c := range running {
		if c.name == "indexer" {
			checkPDFIntake(t, c)
		}
	}
	// The indexer keeps its indexes under its working directory by
	// default: nonroot's home must be writable by the image's user.
	if _, err := os.Stat(filepath.Join(roots["indexer"], home, ".agentmesh", "indexer")); err != nil {
		t.Errorf("indexer wrote no index under %s in its root filesystem: %v", home, err)
	}

	// Stop in reverse, as Kubernetes would each pod: SIGTERM, exit 0.
	for i := len(running) - 1; i >= 0; i-- {
		running[i].stop(t)
	}
	running = nil
}

// checkPDFIntake ingests a PDF of two pages into the indexer running in
// its image: its text layer is searchable (pdftotext ran) and its pages
// were rendered for vision (pdftoppm ran), both as the image's user, with
// only what the image holds.
func checkPDFIntake(t *testing.T, indexer *container) {
	t.Helper()
	pdf, err := os.ReadFile("testdata/quarterly.pdf") // services/indexer/internal/pdftest.PDF's output
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(indexer.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	sc := &commonv1.Scope{TenantId: "imagetest"}
	res, err := indexerv1.NewDocumentServiceClient(conn).IngestDocument(ctx, &indexerv1.IngestDocumentRequest{
		Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_REPORT, Title: "Quarterly review", RawContent: "The quarterly review is attached.",
		Attachments: []*indexerv1.Attachment{{Name: "quarterly.pdf", MimeType: "application/pdf", Data: pdf}},
	})
	if err != nil {
		t.Fatalf("ingest a PDF: %v\n%s", err, indexer)
	}
	got, err := indexerv1.NewDocumentServiceClient(conn).GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: sc, DocumentId: res.GetDocument().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	atts := got.GetDocument().GetPipeline().GetAttachments()
	if len(atts) != 1 || !atts[0].GetVisual() || strings.Contains(atts[0].GetNote(), "not installed") {
		t.Errorf("the PDF's attachment %v: want its pages rendered by the image's pdftoppm\n%s", atts, indexer)
	}
	hits, err := indexerv1.NewSearchServiceClient(conn).Search(ctx, &indexerv1.SearchRequest{Scope: sc, Query: "zanzibar reconciliation"})
	if err != nil || len(hits.GetHits()) == 0 || !strings.Contains(hits.GetHits()[0].GetText(), "zanzibar") {
		t.Errorf("search for page 2's words: %v, %v: want the text the image's pdftotext read", hits, err)
	}
}

// devNull gives root the /dev/null every container runtime mounts (the
// services' subprocesses, the indexer's pdftotext and pdftoppm, read
// their standard input from it).
func devNull(t *testing.T, root string) {
	t.Helper()
	dev := filepath.Join(root, "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	null := filepath.Join(dev, "null")
	if err := syscall.Mknod(null, syscall.S_IFCHR|0o666, 1<<8|3); err != nil { // character device 1:3
		t.Fatalf("mknod /dev/null: %v", err)
	}
	if err := os.Chmod(null, 0o666); err != nil {
		t.Fatal(err)
	}
}

// unpack writes img's flattened root filesystem into a new directory, with
// the modes and owners its layers give, as a container runtime does.
func unpack(t *testing.T, img v1.Image) string {
	t.Helper()
	root := t.TempDir()
	// "/" of a container is 0755: the image's user must traverse it.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	type dir struct {
		path string
		mode os.FileMode
	}
	var dirs []dir
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, root+string(filepath.Separator)) {
			t.Fatalf("layer entry %q escapes the root", h.Name)
		}
		mode := h.FileInfo().Mode()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, dir{p, mode})
		case tar.TypeReg:
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("layer entry %q has type %c; the images hold only files and directories", h.Name, h.Typeflag)
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			t.Fatal(err)
		}
	}
	// Modes last: a 0700 directory must not stop the files going in.
	for _, d := range dirs {
		if err := os.Chmod(d.path, d.mode&(os.ModePerm|os.ModeSticky)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// inspectRootfs checks an unpacked image: its one executable is the
// entrypoint, a static binary; there is no shell or other program; the CA
// bundle holds certificates; the user is numeric and not root.
func inspectRootfs(t *testing.T, im Image, root string, cfg v1.Config) {
	t.Helper()
	if len(cfg.Entrypoint) != 1 || cfg.Entrypoint[0] != binDir+im.Name {
		t.Errorf("%s: entrypoint %q, want [%s]", im.Name, cfg.Entrypoint, binDir+im.Name)
	}
	// An image with tools has those, and the dynamic loader they name;
	// every other image only its static entrypoint.
	want := append([]string{binDir + im.Name}, im.Tools.Executables...)
	var executables []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			executables = append(executables, strings.TrimPrefix(p, root))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	executables = slices.DeleteFunc(executables, func(p string) bool {
		return len(im.Tools.Executables) > 0 && strings.HasPrefix(path.Base(p), "ld-linux")
	})
	slices.Sort(executables)
	slices.Sort(want)
	if !slices.Equal(executables, want) {
		t.Errorf("%s: executables in the image %q, want only %q (and, with tools, their loader)", im.Name, executables, want)
	}
	noFiles := []string{"/bin/sh", "/bin/bash", "/bin/busybox", "/usr/bin/env"}
	if len(im.Tools.Executables) == 0 {
		noFiles = append(noFiles, "/lib", "/lib64", "/usr/lib")
	}
	for _, sh := range noFiles {
		if _, err := os.Lstat(filepath.Join(root, sh)); err == nil {
			t.Errorf("%s: the image has %s", im.Name, sh)
		}
	}
	if err := checkStatic(filepath.Join(root, binDir, im.Name)); err != nil {
		t.Errorf("%s: %v", im.Name, err)
	}
	if n, err := readCA(filepath.Join(root, caFile)); err != nil || n < 50 {
		t.Errorf("%s: CA bundle: %d certificates, %v", im.Name, n, err)
	}
	if cfg.User != user() {
		t.Errorf("%s: user %q, want %q", im.Name, cfg.User, user())
	}
}

// note is the last value a wait saw, printed when the wait fails.
type note struct{ s string }

// String returns the value.
func (n *note) String() string { return n.s }

// container is an image's entrypoint running in its root filesystem.
type container struct {
	name, root string
	cmd        *exec.Cmd
	addr       string // from its "serving gRPC" or "serving HTTP" log line
	done       chan error

	log testkit.Buffer // stdout and stderr
}

// String returns the container's name and log, for failure messages.
func (c *container) String() string {
	return "--- " + c.name + " log:\n" + c.log.String()
}

// start runs the entrypoint of cfg chrooted into root, as cfg.User, in
// cfg.WorkingDir, with env and nothing else, and waits for it to log the
// address it serves on.
func start(t *testing.T, name, root string, cfg v1.Config, env []string) *container {
	t.Helper()
	uidS, gidS, _ := strings.Cut(cfg.User, ":")
	u, err1 := strconv.ParseUint(uidS, 10, 32)
	g, err2 := strconv.ParseUint(gidS, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("%s: user %q is not uid:gid: %v", name, cfg.User, err)
	}
	c := &container{name: name, root: root, done: make(chan error, 1)}
	c.cmd = &exec.Cmd{
		Path: cfg.Entrypoint[0], // resolved inside the chroot
		Args: append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...),
		Env:  append(append([]string{}, cfg.Env...), env...),
		Dir:  cfg.WorkingDir,
		SysProcAttr: &syscall.SysProcAttr{
			Chroot:     root,
			Credential: &syscall.Credential{Uid: uint32(u), Gid: uint32(g)},
			Pdeathsig:  syscall.SIGKILL,
			Setpgid:    true,
		},
	}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout = &c.log
	if err := c.cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) {
			t.Skipf("chroot is not permitted here: %v", err)
		}
		t.Fatalf("%s: start: %v", name, err)
	}
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = c.log.Write(append(bytes.Clone(line), '\n'))
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(line, &rec) == nil && (rec.Msg == "serving gRPC" || rec.Msg == "serving HTTP") {
				select {
				case addrc <- rec.Addr:
				default:
				}
			}
		}
		c.done <- c.cmd.Wait()
	}()
	select {
	case c.addr = <-addrc:
	case err := <-c.done:
		c.done <- err
		t.Fatalf("%s exited before serving: %v\n%s", name, err, c)
	case <-time.After(startTimeout):
		t.Fatalf("%s logged no address within %v\n%s", name, startTimeout, c)
	}
	return c
}

// waitServing waits until c's grpc.health.v1 says SERVING for the whole
// server.
func waitServing(t *testing.T, c *container) {
	t.Helper()
	conn, err := grpc.NewClient(c.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	var last note
	testkit.Eventually(t, startTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			last.s = err.Error()
			return false
		}
		last.s = resp.GetStatus().String()
		return resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, "%s: grpc.health.v1 Check: last %s\n%s", c.name, &last, c)
	t.Logf("%s serves grpc.health.v1 SERVING on %s", c.name, c.addr)
}

// checkProcess checks, through /proc, that c runs as the image's user
// inside its root filesystem.
func (c *container) checkProcess(t *testing.T) {
	t.Helper()
	pid := c.cmd.Process.Pid
	rootLink, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
	if err != nil {
		t.Fatal(err)
	}
	if rootLink != c.root {
		t.Errorf("%s: process root %s, want %s", c.name, rootLink, c.root)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 5 && (f[0] == "Uid:" || f[0] == "Gid:") {
			if f[1] != "65532" || f[2] != "65532" {
				t.Errorf("%s: %s, want 65532", c.name, line)
			}
		}
	}
}

// stop sends SIGTERM and expects a clean exit within SHUTDOWN_TIMEOUT's
// default and a margin.
func (c *container) stop(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("%s: SIGTERM: %v", c.name, err)
		return
	}
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("%s: exit after SIGTERM: %v\n%s", c.name, err, c)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s: still running 30s after SIGTERM\n%s", c.name, c)
		c.kill()
	}
}

// kill ends c at once; it does nothing to a process that has exited.
func (c *container) kill() { _ = c.cmd.Process.Kill() }

// get returns the status code and body of a GET to url.
func get(url string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b)
}
