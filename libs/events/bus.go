package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Reconnection tuning for [Connect].
const (
	reconnectWait       = time.Second
	reconnectJitter     = 500 * time.Millisecond
	reconnectJitterTLS  = time.Second
	drainTimeout        = 30 * time.Second
	initialConnectRetry = 500 * time.Millisecond
)

// Bus is a connection to NATS with JetStream, the handle every publisher and
// consumer in the mesh goes through. A Bus is safe for concurrent use.
type Bus struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	logger *slog.Logger
	closed chan struct{} // closed by the connection's ClosedHandler

	metricsOnce sync.Once
	metrics     *instruments // set once by meters

	idsMu sync.Mutex
	ids   *EventIDs // guarded by idsMu: set once read (EventIDs)
}

// Connect dials the NATS server(s) at url (a comma-separated list is
// accepted) as clientName and returns a Bus.
//
// Once connected, the connection reconnects forever, logging disconnects,
// reconnects and asynchronous errors on logger (nil discards them). While
// no server accepts the initial connection, Connect keeps trying until ctx is
// done; any other connection error (bad URL, authentication) is returned at
// once.
func Connect(ctx context.Context, url, clientName string, logger *slog.Logger) (*Bus, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With(slog.String("component", "events"), slog.String("nats_client", clientName))
	closed := make(chan struct{})
	opts := []nats.Option{
		nats.Name(clientName),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.ReconnectJitter(reconnectJitter, reconnectJitterTLS),
		nats.DrainTimeout(drainTimeout),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				logger.Warn("nats disconnected", slog.Any("error", err))
				return
			}
			logger.Info("nats disconnected")
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats reconnected", slog.String("server", nc.ConnectedUrlRedacted()))
		}),
		nats.ClosedHandler(func(*nats.Conn) {
			logger.Debug("nats connection closed")
			close(closed)
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{slog.Any("error", err)}
			if sub != nil {
				attrs = append(attrs, slog.String("subject", sub.Subject))
			}
			logger.Error("nats async error", attrs...)
		}),
	}

	var nc *nats.Conn
	for {
		var err error
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			break
		}
		if !errors.Is(err, nats.ErrNoServers) {
			return nil, fmt.Errorf("events: connect %s: %w", url, err)
		}
		logger.Warn("nats not reachable yet, retrying", slog.Any("error", err))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("events: connect %s: %w (last error: %w)", url, ctx.Err(), err)
		case <-time.After(initialConnectRetry):
		}
	}

	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("events: jetstream: %w", err)
	}
	logger.Info("nats connected", slog.String("server", nc.ConnectedUrlRedacted()))
	return &Bus{nc: nc, js: js, logger: logger, closed: closed}, nil
}

// Conn returns the underlying NATS connection, for core NATS request/reply
// or status checks. Callers must not close it; call [Bus.Close].
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns the JetStream context the Bus publishes and consumes
// with, for operations this package does not wrap.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Close drains the connection: subscriptions stop receiving, in-flight
// messages are processed, pending publishes are flushed, and the connection
// is closed. It blocks until the connection is closed (at most the drain
// timeout of 30s). Stop consumers ([Consumer.Stop]) before calling Close so
// their handlers finish first. Close is safe to call more than once.
func (b *Bus) Close() error {
	if b.nc.IsClosed() {
		<-b.closed
		return nil
	}
	if err := b.nc.Drain(); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			<-b.closed
			return nil
		}
		// Draining is impossible (e.g. the connection is reconnecting):
		// close outright so nothing leaks.
		b.nc.Close()
		<-b.closed
		return fmt.Errorf("events: drain: %w", err)
	}
	<-b.closed
	return nil
}

// headerCarrier adapts nats.Header to propagation.TextMapCarrier. NATS
// headers are case-sensitive; the W3C propagator uses lower-case keys on
// both sides, so no canonicalisation is needed.
type headerCarrier nats.Header

// Get returns the first value of key.
func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces the values of key with value.
func (c headerCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the header names.
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
