package events

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/wrapperspb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

func TestMain(m *testing.M) {
	// The package reads the global propagator, as services do after their
	// telemetry set-up; the tests install the W3C one once, here.
	otel.SetTextMapPropagator(propagation.TraceContext{})
	goleak.VerifyTestMain(m)
}

// testLogger returns a logger that writes to the test log when -v is set
// and discards otherwise.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// startNATS runs an in-process nats-server with JetStream on a random port
// and returns it; it shuts down when the test ends.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(5 * time.Second) {
		ns.Shutdown()
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	return ns
}

// newBus connects a Bus to ns and closes it when the test ends (before ns
// shuts down, since cleanups run last-in first-out).
func newBus(t *testing.T, ns *server.Server) *Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := Connect(ctx, ns.ClientURL(), t.Name(), testLogger(t))
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// newBusWithStreams starts a server, connects and provisions the streams.
func newBusWithStreams(t *testing.T) *Bus {
	t.Helper()
	b := newBus(t, startNATS(t))
	if err := b.EnsureStreams(testContext(t)); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	return b
}

// testContext returns a context cancelled when the test ends or after 15s.
func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 10ms until it is true, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-time.After(10 * time.Millisecond)
	}
}

// testEvent returns a fresh event for tenant acme with a string payload.
func testEvent(t *testing.T, text string) *commonv1.Event {
	t.Helper()
	ev, err := NewEvent("test.happened", "events-test", &commonv1.Scope{TenantId: "acme"}, "corr-1", wrapperspb.String(text))
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	return ev
}

// streamMsgs returns the number of messages stored in stream.
func streamMsgs(t *testing.T, b *Bus, stream string) uint64 {
	t.Helper()
	s, err := b.JetStream().Stream(testContext(t), stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(testContext(t))
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.Msgs
}

// startFerret runs an in-process FerretDB (SQLite backend) for the test and
// returns a fresh database on it.
func startFerret(t *testing.T) *mongo.Database {
	t.Helper()
	return startFerretMonitored(t, nil)
}

// startFerretMonitored is startFerret with the client's commands reported
// to monitor, if not nil.
func startFerretMonitored(t *testing.T, monitor *event.CommandMonitor) *mongo.Database {
	t.Helper()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: "127.0.0.1:0"},
		Handler:   "sqlite",
		SQLiteURL: "file:" + t.TempDir() + "/",
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("ferretdb: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = f.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
	})

	copts := options.Client().ApplyURI(f.MongoDBURI())
	if monitor != nil {
		copts.SetMonitor(monitor)
	}
	client, err := mongo.Connect(copts)
	if err != nil {
		t.Fatalf("mongo connect: %v", err)
	}
	t.Cleanup(func() {
		if err := client.Disconnect(context.Background()); err != nil {
			t.Errorf("mongo disconnect: %v", err)
		}
	})
	waitFor(t, 10*time.Second, "ferretdb ping", func() bool {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		return client.Ping(pctx, nil) == nil
	})
	return client.Database(fmt.Sprintf("events_test_%s", uuid.NewString()[:8]))
}
