package testkit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/mongox"
)

// cleanupTimeout bounds the database drop and client disconnect that the
// Mongo helpers run in t.Cleanup.
const cleanupTimeout = 10 * time.Second

// NewNATS starts a private NATS server with JetStream stored in t.TempDir()
// and shuts it down in t.Cleanup. It fails the test if the server does not
// start.
func NewNATS(t testing.TB) *NATS {
	t.Helper()
	n, err := StartNATS(NATSOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("testkit.NewNATS: %v", err)
	}
	t.Cleanup(n.Shutdown)
	return n
}

// NewNATSCluster starts a JetStream cluster of n servers in this process,
// each with its own store in t.TempDir(), and shuts them down in t.Cleanup.
// The servers start together (a clustered JetStream server is ready only
// once it meets its peers). Join their URLs with commas for events.Connect.
func NewNATSCluster(t testing.TB, n int) []*NATS {
	t.Helper()
	return StartNATSCluster(t, NATSClusterOptions(t, n))
}

// NATSClusterOptions plans a JetStream cluster of n servers on loopback:
// each server's client and cluster ports (free a moment ago), its store in
// t.TempDir() and its routes to the others. A test that must start clients
// before the servers reads the client URLs from it ([NATSOptions.URL]) and
// starts the servers with StartNATSCluster.
func NATSClusterOptions(t testing.TB, n int) []NATSOptions {
	t.Helper()
	ports := make([]int, 2*n) // client ports, then cluster ports
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("testkit.NATSClusterOptions: %v", err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		l.Close()
	}
	opts := make([]NATSOptions, n)
	for i := range n {
		var routes []string
		for j := range n {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+j]))
			}
		}
		opts[i] = NATSOptions{StoreDir: t.TempDir(), Port: ports[i], ServerName: fmt.Sprintf("n%d", i+1), Cluster: "agentmesh", ClusterPort: ports[n+i], Routes: routes}
	}
	return opts
}

// StartNATSCluster starts one server for each of opts, all together, and
// shuts them down in t.Cleanup. It fails the test if any does not start.
func StartNATSCluster(t testing.TB, opts []NATSOptions) []*NATS {
	t.Helper()
	servers := make([]*NATS, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i, o := range opts {
		wg.Go(func() { servers[i], errs[i] = StartNATS(o) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			for _, s := range servers {
				if s != nil {
					s.Shutdown()
				}
			}
			t.Fatalf("testkit: NATS cluster server %d: %v", i+1, err)
		}
	}
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	return servers
}

// NewMongo starts a private FerretDB server on SQLite files in t.TempDir()
// and stops it in t.Cleanup. Use it when a test stops or restarts the
// server; otherwise MongoDB and MongoURI are faster. It fails the test if
// the server does not start.
func NewMongo(t testing.TB) *Mongo {
	t.Helper()
	m, err := StartMongo(context.Background(), MongoOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("testkit.NewMongo: %v", err)
	}
	t.Cleanup(m.Stop)
	return m
}

// shared is the FerretDB server used by MongoDB and MongoURI: started on
// first use, in a directory under os.TempDir named after the test binary's
// process (sharedDirPrefix<pid>-…), and never stopped before the test
// binary exits. Each test gets its own database on it. Nothing runs at that
// exit, so the next test binary to start one removes the directories of
// processes that are gone (removeStaleDirs): without that, every `make
// test` left dozens of them behind, up to hundreds of MB each.
var shared struct {
	once sync.Once
	m    *Mongo
	err  error
}

// sharedDirPrefix starts the name of a shared server's directory.
const sharedDirPrefix = "agentmesh-testkit-mongo-"

// removeStaleDirs removes the directories under tmp named
// prefix<pid>-… whose process has exited. A directory of a live process
// (another test binary running now) stays, and so does any other name.
func removeStaleDirs(tmp, prefix string) {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.IsDir() {
			continue
		}
		digits, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(digits)
		if !ok || err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
	}
}

// processAlive reports whether a process with id pid exists (signal 0
// checks without sending anything; EPERM means it exists as another user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// sharedMongo returns the shared server, starting it on the first call. It
// fails the test if the server could not be started.
func sharedMongo(t testing.TB) *Mongo {
	t.Helper()
	shared.once.Do(func() {
		removeStaleDirs(os.TempDir(), sharedDirPrefix)
		dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", sharedDirPrefix, os.Getpid()))
		if err != nil {
			shared.err = err
			return
		}
		shared.m, shared.err = StartMongo(context.Background(), MongoOptions{Dir: dir})
	})
	if shared.err != nil {
		t.Fatalf("testkit: start shared FerretDB: %v", shared.err)
	}
	return shared.m
}

// MongoDB returns a new, empty database on the test binary's shared FerretDB
// server, through a client of its own. The database name is unique to this
// call. t.Cleanup drops the database and disconnects the client.
func MongoDB(t testing.TB) *mongo.Database {
	t.Helper()
	return sharedMongo(t).Database(t)
}

// EachWriterMode runs body as two parallel subtests, each on a new database
// of the shared FerretDB: "many writers" (the default of service binaries)
// and "single writer" (the client declared the database's only writer, as
// agentmesh up does; see mongox). Stores that take single-writer shortcuts
// test both paths with one body.
func EachWriterMode(t *testing.T, body func(t *testing.T, db *mongo.Database)) {
	t.Helper()
	eachWriterMode(t, func(t *testing.T, single bool) {
		db := MongoDB(t)
		if single {
			mongox.MarkSingleWriter(db.Client())
		}
		body(t, db)
	})
}

// EachWriterModeCounted is EachWriterMode on databases of MongoDBCounted:
// a store's test holds its hot paths to a budget of round trips in both
// writer modes.
func EachWriterModeCounted(t *testing.T, body func(t *testing.T, db *mongo.Database, rt *RoundTrips)) {
	t.Helper()
	eachWriterMode(t, func(t *testing.T, single bool) {
		db, rt := MongoDBCounted(t)
		if single {
			mongox.MarkSingleWriter(db.Client())
		}
		body(t, db, rt)
	})
}

// eachWriterMode runs body in a parallel subtest for each writer mode.
func eachWriterMode(t *testing.T, body func(t *testing.T, single bool)) {
	t.Helper()
	for _, single := range []bool{false, true} {
		name := "many writers"
		if single {
			name = "single writer"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body(t, single)
		})
	}
}

// MongoURI returns the shared FerretDB server's connection string and a
// database name unique to this call, for code under test that connects by
// itself. t.Cleanup drops the database.
func MongoURI(t testing.TB) (uri, dbName string) {
	t.Helper()
	m := sharedMongo(t)
	dbName = DatabaseName(t)
	t.Cleanup(func() { m.dropDatabase(t, dbName) })
	return m.URI(), dbName
}

// Database returns a new, empty database on m, through a client of its own,
// with a name unique to this call. t.Cleanup drops the database and
// disconnects the client, so m must still be running when the test's
// cleanups run (true for a server from NewMongo unless the test stopped it).
func (m *Mongo) Database(t testing.TB) *mongo.Database {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	if err != nil {
		t.Fatalf("testkit: connect to %s: %v", m.URI(), err)
	}
	mongox.BindDirect(client, m) // used once a test declares it the only writer
	db := client.Database(DatabaseName(t))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := db.Drop(ctx); err != nil {
			t.Errorf("testkit: drop database %s: %v", db.Name(), err)
		}
		if err := client.Disconnect(ctx); err != nil {
			t.Errorf("testkit: disconnect from %s: %v", m.URI(), err)
		}
	})
	return db
}

// dropDatabase drops dbName on m through a short-lived client, reporting
// failures with t.Errorf.
func (m *Mongo) dropDatabase(t testing.TB, dbName string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	if err != nil {
		t.Errorf("testkit: connect to %s: %v", m.URI(), err)
		return
	}
	defer func() { _ = client.Disconnect(ctx) }()
	if err := client.Database(dbName).Drop(ctx); err != nil {
		t.Errorf("testkit: drop database %s: %v", dbName, err)
	}
}

// maxDatabaseName is FerretDB's limit on database names (it accepts
// [a-zA-Z0-9_-]{1,63}).
const maxDatabaseName = 63

// DatabaseName returns a database name derived from t.Name(): "t_", the test
// name lowercased with every character outside [a-z0-9_] replaced by '_' and
// truncated, then "_" and 8 random hex digits. The result is at most 63
// characters and valid on both FerretDB and MongoDB. Two calls return
// different names with overwhelming probability.
func DatabaseName(t testing.TB) string {
	const prefix, suffixLen = "t_", 1 + 8
	var b strings.Builder
	for _, r := range strings.ToLower(t.Name()) {
		if b.Len() == maxDatabaseName-len(prefix)-suffixLen {
			break
		}
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '_' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return fmt.Sprintf("%s%s_%08x", prefix, b.String(), rand.Uint32())
}
