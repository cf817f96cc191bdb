package testkit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/agentmesh/agentmesh/libs/telemetry"
)

// mongoReadyTimeout bounds how long StartMongo waits for FerretDB to answer
// a ping.
const mongoReadyTimeout = 5 * time.Second

// ferretNewMu serializes ferretdb.New, which writes a package-level variable
// (version.Get().Package) without synchronization.
var ferretNewMu sync.Mutex

// MongoOptions configures StartMongo.
type MongoOptions struct {
	// Dir holds the SQLite files, one per database. It is created if
	// missing. Data persists there across Stop and StartMongo.
	Dir string
	// Addr is the TCP listen address; empty means 127.0.0.1:0 (a random
	// free port).
	Addr string
	// Logger receives FerretDB's logs. Nil discards them (FerretDB would
	// otherwise log to slog.Default).
	Logger *slog.Logger
	// SyncEveryCommit makes SQLite flush its write-ahead log to disk at
	// every commit (synchronous=FULL). By default it flushes at
	// checkpoints only (synchronous=NORMAL in WAL mode): a commit survives
	// the process being killed, and only an operating-system crash or
	// power loss can lose the last commits, as with the embedded NATS
	// server, whose file store syncs on an interval. It halves the cost of
	// a write: 50 concurrent updates by _id at 10,000 documents went from
	// 615–1,213/s to 1,339–1,720/s on 2 cores.
	SyncEveryCommit bool
}

// Mongo is an embedded FerretDB v1 server with the SQLite backend, speaking
// the MongoDB wire protocol on loopback. Its methods are safe for
// concurrent use.
type Mongo struct {
	uri   string
	files *sqliteFiles
	ids   *idIndexer

	cancel   context.CancelFunc
	done     chan struct{} // closed when FerretDB's Run has returned
	stopOnce sync.Once
}

// StartMongo starts FerretDB in this process on opts.Dir and returns once a
// MongoDB client can ping it. The server runs until Stop is called or ctx is
// canceled. It returns an error if opts.Dir cannot be created, the address
// cannot be listened on, or the server does not answer within 5 seconds (or
// before ctx ends); nothing is left running in that case. Opts.Addr with
// port 0 picks a free port; URI reports it.
func StartMongo(ctx context.Context, opts MongoOptions) (*Mongo, error) {
	if opts.Dir == "" {
		return nil, errors.New("testkit: MongoOptions.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("testkit: mongo dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("testkit: mongo dir: %w", err)
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	logger := slog.New(slog.DiscardHandler)
	if opts.Logger != nil {
		// FerretDB derives a logger with each SQL statement's arguments
		// for a debug line (see telemetry.DeferAttrs).
		logger = slog.New(telemetry.DeferAttrs(opts.Logger.Handler()))
	}
	// url.URL escapes characters such as '?' and '#' in the directory name;
	// for ordinary paths this is "file:" + dir + "/".
	syncMode := "synchronous(normal)"
	if opts.SyncEveryCommit {
		syncMode = "synchronous(full)"
	}
	sqliteURL := (&url.URL{Scheme: "file", Path: dir + "/", RawQuery: url.Values{"_pragma": {syncMode}}.Encode()}).String()

	// ferretdb.New leaks its SQLite backend when it cannot listen, and
	// FerretDB's leak detector then panics in a finalizer, which kills the
	// process at a later GC. So make sure the address can be listened on
	// first. (For a fixed port, another process could still take it between
	// this check and New; with port 0 that cannot happen.)
	if err := checkListen(addr); err != nil {
		return nil, fmt.Errorf("testkit: start ferretdb: %w", err)
	}

	ferretNewMu.Lock()
	f, err := ferretdb.New(&ferretdb.Config{
		Listener:  ferretdb.ListenerConfig{TCP: addr},
		Logger:    logger,
		Handler:   "sqlite",
		SQLiteURL: sqliteURL,
	})
	ferretNewMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("testkit: start ferretdb: %w", err)
	}

	// The listener is bound by New, so the URI is known before Run.
	runCtx, cancel := context.WithCancel(ctx)
	files := newSQLiteFiles(dir, syncMode)
	m := &Mongo{
		uri:    f.MongoDBURI(),
		files:  files,
		ids:    newIDIndexer(files),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	indexed := make(chan struct{})
	go func() {
		defer close(indexed)
		m.ids.run(runCtx)
	}()
	go func() {
		defer close(m.done)
		_ = f.Run(runCtx) // always nil; it returns when runCtx is done
		<-indexed
		// Direct writes (DeleteIDs, InsertDocs, ReplaceDoc) stop with
		// FerretDB, not while it still serves the connections it drains.
		files.close()
	}()

	if err := m.waitReady(ctx); err != nil {
		m.Stop()
		return nil, err
	}
	return m, nil
}

// checkListen reports whether a TCP listener can be opened on addr.
func checkListen(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

// waitReady pings the server until it answers, the server exits, ctx ends or
// mongoReadyTimeout passes.
func (m *Mongo) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, mongoReadyTimeout)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(m.uri).
		SetServerSelectionTimeout(mongoReadyTimeout))
	if err != nil {
		return fmt.Errorf("testkit: mongo client: %w", err)
	}
	// Disconnect before returning: FerretDB gives connections still open at
	// shutdown 3 seconds to close.
	defer func() { _ = client.Disconnect(context.Background()) }()

	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		pingCtx, pingCancel := context.WithTimeout(ctx, time.Second)
		err := client.Ping(pingCtx, nil)
		pingCancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkit: ferretdb at %s not ready: %w", m.uri, err)
		case <-m.done:
			return errors.New("testkit: ferretdb stopped during startup")
		case <-tick.C:
		}
	}
}

// IndexIDs gives every collection that exists now the index FerretDB's
// lookups by _id need (see idIndexer); the server does it on its own every
// second for new collections.
func (m *Mongo) IndexIDs(ctx context.Context) error { return m.ids.indexAll(ctx) }

// URI returns the MongoDB connection string, such as
// mongodb://127.0.0.1:41234/.
func (m *Mongo) URI() string { return m.uri }

// Stop shuts the server down and waits until it has closed its listener,
// connections and SQLite files. Clients should disconnect first: FerretDB
// waits up to 3 seconds for connections still open. Stop is idempotent.
func (m *Mongo) Stop() {
	m.stopOnce.Do(m.cancel)
	<-m.done
}
