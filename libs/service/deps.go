package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/mongox"
)

// healthInterval is how often dependencies are re-checked.
const healthInterval = 5 * time.Second

// ConnectMongo connects to MongoDB and keeps the "mongo" dependency of health
// up to date until ctx ends. The returned close func disconnects.
func ConnectMongo(ctx context.Context, cfg mongox.Config, health *grpcx.Health) (*mongo.Database, func(), error) {
	client, db, err := mongox.Connect(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	health.Watch(ctx, "mongo", healthInterval, func(ctx context.Context) error { return mongox.Ping(ctx, db) })
	return db, func() {
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(dctx)
	}, nil
}

// ConnectNATS connects to NATS, provisions the mesh's streams with at
// least replicas copies each and keeps the "nats" dependency of health up
// to date until ctx ends. Close the bus on shutdown (it drains). Both steps
// wait, until ctx ends, for a cluster that is still starting: no server
// accepting connections yet, no JetStream leader elected yet (see
// events.Bus.EnsureStreamsReplicated).
func ConnectNATS(ctx context.Context, url, clientName string, replicas int, log *slog.Logger, health *grpcx.Health) (*events.Bus, error) {
	bus, err := events.Connect(ctx, url, clientName, log)
	if err != nil {
		return nil, err
	}
	if err := bus.EnsureStreamsReplicated(ctx, replicas); err != nil {
		bus.Close()
		return nil, err
	}
	health.Watch(ctx, "nats", healthInterval, func(context.Context) error {
		if !bus.Conn().IsConnected() {
			return fmt.Errorf("nats: %s", bus.Conn().Status())
		}
		return nil
	})
	return bus, nil
}

// DialPeer dials another mesh service. Peers are soft dependencies: a peer
// being down does not make this service unready (callers degrade or answer
// Unavailable per RPC); the gateway's /healthz shows each service's own state.
func DialPeer(target string) (*grpc.ClientConn, error) {
	if target == "" {
		return nil, fmt.Errorf("service: empty peer address")
	}
	return grpcx.Dial(target)
}
