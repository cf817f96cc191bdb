// Package testkit starts the infrastructure agentmesh runs on inside the
// current process: a NATS server with JetStream, a FerretDB server that speaks
// the MongoDB wire protocol over SQLite, and loopback gRPC servers.
//
// The starters (StartNATS, StartMongo) take no *testing.T: `agentmesh up`
// uses them to run the mesh on one machine. The helpers that take a
// testing.TB (NewNATS, NewMongo, MongoDB, MongoURI, StartGRPC, Listen,
// Eventually) wrap them for tests: they call t.Helper, fail the test on
// error and register their teardown with t.Cleanup.
package testkit

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsReadyTimeout bounds how long StartNATS waits for the server to accept
// connections. A server starts in well under a second, but a cluster's
// servers starting together on a machine that runs two test packages at
// once took more than 5 s once in CI (TestStreamsEnsuredWhileTheClusterForms).
const natsReadyTimeout = 30 * time.Second

// NATSOptions configures StartNATS. The zero value is valid but keeps
// JetStream data in the nats-server default location; set StoreDir.
type NATSOptions struct {
	// StoreDir is the JetStream storage directory. Streams and their
	// messages persist there across restarts.
	StoreDir string
	// Host is the client listen address; empty means 127.0.0.1.
	Host string
	// Port is the client port; 0 or -1 means a random free port.
	Port int
	// ServerName names the server; empty lets nats-server generate one.
	ServerName string
	// Logger receives the server's notices, warnings and errors (debug and
	// trace lines are dropped). Nil disables the server's logging.
	Logger *slog.Logger
	// Cluster names the JetStream cluster this server joins; empty runs it
	// alone. A clustered server needs a ServerName.
	Cluster string
	// ClusterPort is the port other servers route to; 0 picks one.
	ClusterPort int
	// Routes are the cluster URLs (nats://host:port) of the other servers.
	Routes []string
}

// URL returns the client URL a server started with o will listen on, for
// options with a fixed Port (see NATSClusterOptions).
func (o NATSOptions) URL() string {
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	return "nats://" + net.JoinHostPort(host, strconv.Itoa(o.Port))
}

// NATS is an embedded nats-server with JetStream enabled. Its methods are
// safe for concurrent use.
type NATS struct {
	srv *server.Server
}

// StartNATS starts a nats-server in this process with JetStream stored in
// opts.StoreDir and returns once it accepts client connections. It returns
// an error if the options are invalid or the server is not ready within 5
// seconds; in both cases nothing is left running. The caller must call
// Shutdown.
func StartNATS(opts NATSOptions) (*NATS, error) {
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	sopts := &server.Options{
		ServerName:             opts.ServerName,
		Host:                   host,
		Port:                   port,
		JetStream:              true,
		StoreDir:               opts.StoreDir,
		NoLog:                  opts.Logger == nil,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
	}
	if opts.Cluster != "" {
		cport := opts.ClusterPort
		if cport == 0 {
			cport = server.RANDOM_PORT
		}
		sopts.Cluster = server.ClusterOpts{Name: opts.Cluster, Host: host, Port: cport}
		for _, r := range opts.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("testkit: route %q: %w", r, err)
			}
			sopts.Routes = append(sopts.Routes, u)
		}
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("testkit: configure nats-server: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLogger(slogNATSLogger{l: opts.Logger}, false, false)
	}
	srv.Start()
	if !srv.ReadyForConnections(natsReadyTimeout) {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("testkit: nats-server not ready for connections after " + natsReadyTimeout.String())
	}
	if !srv.JetStreamEnabled() {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, errors.New("testkit: nats-server started without JetStream")
	}
	return &NATS{srv: srv}, nil
}

// ClusterURL returns the URL other servers route to, such as
// nats://127.0.0.1:41235, or "" for a server outside any cluster.
func (n *NATS) ClusterURL() string {
	addr := n.srv.ClusterAddr()
	if addr == nil {
		return ""
	}
	return "nats://" + addr.String()
}

// URL returns the client URL, such as nats://127.0.0.1:41234.
func (n *NATS) URL() string { return n.srv.ClientURL() }

// Server returns the underlying nats-server, for inspection (JetStream
// account info, connection counts) in tests.
func (n *NATS) Server() *server.Server { return n.srv }

// Shutdown stops the server and waits until it has stopped. It closes client
// connections and flushes JetStream to StoreDir. Calling it again is a no-op.
func (n *NATS) Shutdown() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// slogNATSLogger adapts a *slog.Logger to server.Logger.
type slogNATSLogger struct{ l *slog.Logger }

// Noticef logs at Info.
func (s slogNATSLogger) Noticef(format string, v ...any) { s.l.Info(fmt.Sprintf(format, v...)) }

// Warnf logs at Warn.
func (s slogNATSLogger) Warnf(format string, v ...any) { s.l.Warn(fmt.Sprintf(format, v...)) }

// Fatalf logs at Error; unlike nats-server's own logger it does not exit.
func (s slogNATSLogger) Fatalf(format string, v ...any) { s.l.Error(fmt.Sprintf(format, v...)) }

// Errorf logs at Error.
func (s slogNATSLogger) Errorf(format string, v ...any) { s.l.Error(fmt.Sprintf(format, v...)) }

// Debugf drops the line.
func (slogNATSLogger) Debugf(string, ...any) {}

// Tracef drops the line.
func (slogNATSLogger) Tracef(string, ...any) {}

var _ server.Logger = slogNATSLogger{}
