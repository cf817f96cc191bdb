package testkit_test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/agentmesh/agentmesh/libs/testkit"
)

// startBudget is the longest an embedded server may take to become ready.
const startBudget = 2 * time.Second

// The tests that stop everything they start run serially and end with
// goleak.VerifyNone; goleak.IgnoreCurrent() taken at their start keeps
// goroutines of other tests (the shared FerretDB server, with -count > 1)
// out of the check.

func TestStartNATSJetStream(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	start := time.Now()
	n, err := testkit.StartNATS(testkit.NATSOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	elapsed := time.Since(start)
	defer n.Shutdown()
	t.Logf("NATS ready in %v at %s", elapsed, n.URL())
	if elapsed > startBudget {
		t.Errorf("NATS ready after %v, want < %v", elapsed, startBudget)
	}
	if !strings.HasPrefix(n.URL(), "nats://127.0.0.1:") {
		t.Errorf("URL() = %q, want nats://127.0.0.1:<port>", n.URL())
	}

	nc, js := connectJS(t, n.URL())
	defer nc.Close()
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	if _, err := js.Publish(ctx, "events.a", []byte("hello")); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "EVENTS", jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("CreateConsumer: %v", err)
	}
	msg, err := cons.Next(jetstream.FetchMaxWait(startBudget))
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	if got := string(msg.Data()); got != "hello" {
		t.Errorf("consumed %q, want %q", got, "hello")
	}
	if err := msg.Ack(); err != nil {
		t.Errorf("Ack: %v", err)
	}
	nc.Close()
	n.Shutdown()
	n.Shutdown() // a second Shutdown is a no-op
}

func TestStartNATSRestartKeepsStreams(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	ctx := t.Context()

	n, err := testkit.StartNATS(testkit.NATSOptions{StoreDir: dir, ServerName: "restart"})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	nc, js := connectJS(t, n.URL())
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatalf("CreateStream: %v", err)
	}
	ack, err := js.Publish(ctx, "jobs.1", []byte("payload"))
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	nc.Close()
	n.Shutdown()

	n, err = testkit.StartNATS(testkit.NATSOptions{StoreDir: dir, ServerName: "restart"})
	if err != nil {
		t.Fatalf("StartNATS again: %v", err)
	}
	defer n.Shutdown()
	nc, js = connectJS(t, n.URL())
	defer nc.Close()
	stream, err := js.Stream(ctx, "JOBS")
	if err != nil {
		t.Fatalf("stream JOBS after restart: %v", err)
	}
	msg, err := stream.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("GetMsg(%d) after restart: %v", ack.Sequence, err)
	}
	if msg.Subject != "jobs.1" || string(msg.Data) != "payload" {
		t.Errorf("after restart got %s %q, want jobs.1 %q", msg.Subject, msg.Data, "payload")
	}
}

func TestStartNATSLogger(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rec := &recorder{}
	n, err := testkit.StartNATS(testkit.NATSOptions{StoreDir: t.TempDir(), Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("StartNATS: %v", err)
	}
	defer n.Shutdown()
	if rec.count(slog.LevelInfo) == 0 {
		t.Errorf("no startup notices reached the logger")
	}

	tests := []struct {
		name string
		log  func(format string, v ...any)
		want slog.Level
		drop bool
	}{
		{name: "notice", log: n.Server().Noticef, want: slog.LevelInfo},
		{name: "warn", log: n.Server().Warnf, want: slog.LevelWarn},
		{name: "error", log: n.Server().Errorf, want: slog.LevelError},
		{name: "debug", log: n.Server().Debugf, drop: true},
		{name: "trace", log: n.Server().Tracef, drop: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := "probe " + tc.name
			tc.log("%s", msg)
			lvl, ok := rec.find(msg)
			switch {
			case tc.drop && ok:
				t.Errorf("%s line logged at %v, want dropped", tc.name, lvl)
			case !tc.drop && !ok:
				t.Errorf("%s line not logged", tc.name)
			case !tc.drop && lvl != tc.want:
				t.Errorf("%s line logged at %v, want %v", tc.name, lvl, tc.want)
			}
		})
	}
}

func TestStartMongoRestartKeepsData(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// FerretDB must not log to slog.Default when no Logger is given.
	rec := &recorder{}
	prev := slog.Default()
	slog.SetDefault(slog.New(rec))
	defer slog.SetDefault(prev)

	dir := t.TempDir()
	ctx := t.Context()

	start := time.Now()
	m, err := testkit.StartMongo(ctx, testkit.MongoOptions{Dir: dir})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	elapsed := time.Since(start)
	t.Logf("FerretDB ready in %v at %s", elapsed, m.URI())
	if elapsed > startBudget {
		t.Errorf("FerretDB ready after %v, want < %v", elapsed, startBudget)
	}

	client := connectMongo(t, m.URI())
	coll := client.Database("persist").Collection("docs")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 42}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	if err := client.Disconnect(ctx); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	stopStart := time.Now()
	m.Stop()
	t.Logf("FerretDB stopped in %v", time.Since(stopStart))
	m.Stop() // idempotent

	start = time.Now()
	m, err = testkit.StartMongo(ctx, testkit.MongoOptions{Dir: dir})
	if err != nil {
		t.Fatalf("StartMongo again: %v", err)
	}
	t.Logf("FerretDB restarted in %v (existing data)", time.Since(start))
	defer m.Stop()
	client = connectMongo(t, m.URI())
	defer func() { _ = client.Disconnect(context.Background()) }()
	var got struct {
		ID string `bson:"_id"`
		N  int    `bson:"n"`
	}
	if err := client.Database("persist").Collection("docs").FindOne(ctx, bson.D{{Key: "_id", Value: "a"}}).Decode(&got); err != nil {
		t.Fatalf("FindOne after restart: %v", err)
	}
	if got.N != 42 {
		t.Errorf("after restart n = %d, want 42", got.N)
	}

	if err := client.Disconnect(ctx); err != nil {
		t.Fatalf("Disconnect: %v", err)
	}
	m.Stop()
	if n := rec.total(); n != 0 {
		t.Errorf("FerretDB wrote %d records to slog.Default, want 0", n)
	}
}

func TestStartMongoLogger(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	rec := &recorder{}
	m, err := testkit.StartMongo(t.Context(), testkit.MongoOptions{Dir: t.TempDir(), Logger: slog.New(rec)})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	m.Stop()
	if rec.total() == 0 {
		t.Errorf("no FerretDB logs reached MongoOptions.Logger")
	}
}

func TestStartMongoStopsWithContext(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ctx, cancel := context.WithCancel(t.Context())
	m, err := testkit.StartMongo(ctx, testkit.MongoOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartMongo: %v", err)
	}
	cancel()
	m.Stop() // returns once the canceled server has shut down
	client := connectMongo(t, m.URI())
	defer func() { _ = client.Disconnect(context.Background()) }()
	pingCtx, pingCancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer pingCancel()
	if err := client.Ping(pingCtx, nil); err == nil {
		t.Errorf("Ping succeeded after the context was canceled, want the server gone")
	}
}

func TestStartMongoErrors(t *testing.T) {
	busy := testkit.Listen(t)
	tests := []struct {
		name string
		opts testkit.MongoOptions
	}{
		{name: "no dir", opts: testkit.MongoOptions{}},
		{name: "bad addr", opts: testkit.MongoOptions{Dir: t.TempDir(), Addr: "256.0.0.1:0"}},
		{name: "port in use", opts: testkit.MongoOptions{Dir: t.TempDir(), Addr: busy.Addr().String()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := testkit.StartMongo(t.Context(), tc.opts); err == nil {
				m.Stop()
				t.Fatalf("StartMongo(%+v) succeeded, want an error", tc.opts)
			}
		})
	}
	// A FerretDB backend leaked by a failed start panics in its finalizer and
	// kills the test binary; run finalizers now so that shows up here.
	runtime.GC()
	runtime.GC()
}

// TestHelpersCleanUp runs the T-helpers in a subtest and checks that their
// cleanups leave no goroutine behind.
func TestHelpersCleanUp(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	t.Run("helpers", func(t *testing.T) {
		n := testkit.NewNATS(t)
		nc, err := nats.Connect(n.URL())
		if err != nil {
			t.Fatalf("nats.Connect: %v", err)
		}
		t.Cleanup(nc.Close)

		m := testkit.NewMongo(t)
		db := m.Database(t)
		if _, err := db.Collection("c").InsertOne(t.Context(), bson.D{{Key: "x", Value: 1}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}

		conn := testkit.StartGRPC(t, func(s *grpc.Server) {
			healthpb.RegisterHealthServer(s, health.NewServer())
		})
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatalf("health Check: %v", err)
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health status = %v, want SERVING", resp.GetStatus())
		}
	})
}

func TestMongoDBIsFreshPerCall(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var first, second string
	t.Run("two databases", func(t *testing.T) {
		a, b := testkit.MongoDB(t), testkit.MongoDB(t)
		first, second = a.Name(), b.Name()
		if first == second {
			t.Fatalf("both calls returned database %q", first)
		}
		if _, err := a.Collection("c").InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		n, err := b.Collection("c").CountDocuments(ctx, bson.D{})
		if err != nil {
			t.Fatalf("CountDocuments: %v", err)
		}
		if n != 0 {
			t.Errorf("second database sees %d documents written to the first, want 0", n)
		}
	})

	// After the subtest's cleanups both databases are gone.
	uri, _ := testkit.MongoURI(t)
	client := connectMongo(t, uri)
	defer func() { _ = client.Disconnect(context.Background()) }()
	names, err := client.ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatalf("ListDatabaseNames: %v", err)
	}
	for _, name := range []string{first, second} {
		if slices.Contains(names, name) {
			t.Errorf("database %q still exists after cleanup", name)
		}
	}
}

func TestMongoURI(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	var dbName string
	t.Run("connect", func(t *testing.T) {
		var uri string
		uri, dbName = testkit.MongoURI(t)
		client := connectMongo(t, uri)
		defer func() { _ = client.Disconnect(context.Background()) }()
		coll := client.Database(dbName).Collection("c")
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "k", Value: "v"}}); err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
			t.Fatalf("CountDocuments = %d, %v; want 1", n, err)
		}
	})
	db := testkit.MongoDB(t)
	names, err := db.Client().ListDatabaseNames(ctx, bson.D{})
	if err != nil {
		t.Fatalf("ListDatabaseNames: %v", err)
	}
	if slices.Contains(names, dbName) {
		t.Errorf("database %q from MongoURI still exists after cleanup", dbName)
	}
}

func TestMongoDBStartsFast(t *testing.T) {
	t.Parallel()
	start := time.Now()
	db := testkit.MongoDB(t)
	if err := db.Client().Ping(t.Context(), nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// The shared server may already be up; either way this is the wait a
	// test sees.
	if elapsed := time.Since(start); elapsed > startBudget {
		t.Errorf("MongoDB(t) ready after %v, want < %v", elapsed, startBudget)
	}
}

func TestDatabaseName(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^[a-z0-9_]{1,63}$`)
	tests := []struct {
		name       string
		wantPrefix string
	}{
		{name: "Simple", wantPrefix: "t_testdatabasename_simple_"},
		{name: "Odd chars: ä/$.#\x00 ok", wantPrefix: "t_testdatabasename_odd_chars_"},
		{name: strings.Repeat("Long", 40), wantPrefix: "t_testdatabasename_long"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := testkit.DatabaseName(t)
			if !valid.MatchString(got) {
				t.Errorf("DatabaseName = %q (len %d), want match %s", got, len(got), valid)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("DatabaseName = %q, want prefix %q", got, tc.wantPrefix)
			}
			if again := testkit.DatabaseName(t); again == got {
				t.Errorf("two calls both returned %q", got)
			}
		})
	}
}

func TestEventually(t *testing.T) {
	t.Parallel()
	t.Run("met", func(t *testing.T) {
		var calls atomic.Int32
		testkit.Eventually(t, time.Second, func() bool { return calls.Add(1) >= 3 })
		if got := calls.Load(); got != 3 {
			t.Errorf("cond called %d times, want 3", got)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		ft := &fatalRecorder{TB: t}
		start := time.Now()
		ft.run(func() {
			testkit.Eventually(ft, 50*time.Millisecond, func() bool { return false }, "queue %s drained", "jobs")
		})
		if elapsed := time.Since(start); elapsed < 50*time.Millisecond {
			t.Errorf("gave up after %v, want >= 50ms", elapsed)
		}
		want := "condition not met within 50ms: queue jobs drained"
		if ft.msg != want {
			t.Errorf("Fatalf message = %q, want %q", ft.msg, want)
		}
	})
}

// connectJS connects a NATS client and its JetStream context to url.
func connectJS(t *testing.T, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("nats.Connect: %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		t.Fatalf("jetstream.New: %v", err)
	}
	return nc, js
}

// connectMongo returns a MongoDB client for uri; the caller disconnects it.
func connectMongo(t *testing.T, uri string) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatalf("mongo.Connect: %v", err)
	}
	return client
}

// recorder is a slog.Handler that keeps every record; it is safe for
// concurrent use (mu guards records).
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.records)
}

func (r *recorder) count(level slog.Level) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rec := range r.records {
		if rec.Level == level {
			n++
		}
	}
	return n
}

// find returns the level of the first record whose message is msg.
func (r *recorder) find(msg string) (slog.Level, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Message == msg {
			return rec.Level, true
		}
	}
	return 0, false
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as testing.T's does, without failing the test.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn in a goroutine and waits for it to return or call Fatalf.
func (f *fatalRecorder) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}
