//go:build e2e

// Package e2e starts the mesh as a user would (the agentmesh binary, `up`)
// and drives it from outside: REST, SSE, and a kill -9 in the middle.
package e2e

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentmesh-e2e-bin")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "agentmesh")
	build := exec.Command("go", "build", "-o", bin, "..")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		panic("building agentmesh: " + err.Error())
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// mesh is a running `agentmesh up` process.
type mesh struct {
	cmd      *exec.Cmd
	mu       sync.Mutex
	out      strings.Builder
	gateway  string
	natsURL  string
	mongoURI string
}

var (
	reGateway = regexp.MustCompile(`gateway\s+(http://localhost:\d+)`)
	reNATS    = regexp.MustCompile(`nats\s+(nats://\S+)`)
	reMongo   = regexp.MustCompile(`mongo\s+(mongodb://\S+)`)
)

// startUp runs `agentmesh up` on dataDir, with env (KEY=value) added to
// the test's environment, until its gateway is healthy.
func startUp(t *testing.T, dataDir string, env ...string) *mesh {
	t.Helper()
	m := &mesh{cmd: exec.Command(bin, "up")}
	m.cmd.Env = append(os.Environ(),
		"AGENTMESH_DATA_DIR="+dataDir,
		"AGENTMESH_GRPC_BASE_PORT=0",
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_LEVEL=warn",
		"OLLAMA_HOST=http://127.0.0.1:1",
	)
	m.cmd.Env = append(m.cmd.Env, env...)
	stdout, _ := m.cmd.StdoutPipe()
	m.cmd.Stderr = io.Discard
	start := time.Now()
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.cmd.Process.Kill(); m.cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			m.mu.Lock()
			m.out.WriteString(sc.Text() + "\n")
			m.mu.Unlock()
		}
	}()
	testkit.Eventually(t, 60*time.Second, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		s := m.out.String()
		if !reGateway.MatchString(s) || !reNATS.MatchString(s) || !reMongo.MatchString(s) {
			return false
		}
		m.gateway = reGateway.FindStringSubmatch(s)[1]
		m.natsURL = reNATS.FindStringSubmatch(s)[1]
		m.mongoURI = reMongo.FindStringSubmatch(s)[1]
		return true
	}, "agentmesh up printed no banner")
	testkit.Eventually(t, 60*time.Second, func() bool {
		resp, err := http.Get(m.gateway + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "healthz not SERVING within 60s")
	t.Logf("mesh serving %v after start", time.Since(start).Round(time.Millisecond))
	return m
}

// TestKill9KeepsData kills `agentmesh up` with SIGKILL and starts it again on
// the same data directory: JetStream streams and messages and Mongo documents
// are still there.
func TestKill9KeepsData(t *testing.T) {
	dataDir := t.TempDir()
	m := startUp(t, dataDir)
	ctx := context.Background()

	nc, err := nats.Connect(m.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	if _, err := js.Publish(ctx, "am.evt.e2e.test.x1.created", []byte("survives"), jetstream.WithMsgID("e2e-1")); err != nil {
		t.Fatalf("publish to the mesh's event stream: %v", err)
	}
	nc.Close()
	client, err := mongo.Connect(options.Client().ApplyURI(m.mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Database("e2e").Collection("things").InsertOne(ctx, bson.M{"_id": "k1", "v": "survives"}); err != nil {
		t.Fatal(err)
	}
	client.Disconnect(ctx)

	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.cmd.Wait()

	m2 := startUp(t, dataDir)
	nc, err = nats.Connect(m2.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ = jetstream.New(nc)
	for _, name := range []string{"AM_EVENTS", "AM_WORK", "AM_DLQ"} {
		if _, err := js.Stream(ctx, name); err != nil {
			t.Errorf("stream %s after restart: %v", name, err)
		}
	}
	s, _ := js.Stream(ctx, "AM_EVENTS")
	msg, err := s.GetLastMsgForSubject(ctx, "am.evt.e2e.test.x1.created")
	if err != nil || string(msg.Data) != "survives" {
		t.Fatalf("event after kill -9: %v %v", msg, err)
	}
	client, err = mongo.Connect(options.Client().ApplyURI(m2.mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(ctx)
	var doc bson.M
	if err := client.Database("e2e").Collection("things").FindOne(ctx, bson.M{"_id": "k1"}).Decode(&doc); err != nil || doc["v"] != "survives" {
		t.Fatalf("document after kill -9: %v %v", doc, err)
	}

	// Ctrl-C shuts down cleanly.
	m2.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- m2.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agentmesh up exited with %v after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("agentmesh up did not stop within 30s of SIGINT")
	}
}
