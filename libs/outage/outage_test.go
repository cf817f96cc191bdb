package outage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/outage"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestDriverErrorsOfAStoppedServer: the errors the MongoDB driver and the
// NATS client really return once their server is gone are outages, and the
// errors of a server that answers are not.
func TestDriverErrorsOfAStoppedServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// MongoDB: a live server's answers first, then the server stops.
	m := testkit.NewMongo(t)
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()).SetServerSelectionTimeout(500 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	coll := client.Database("outage").Collection("c")
	if _, err := coll.InsertOne(ctx, bson.M{"_id": "a"}); err != nil {
		t.Fatal(err)
	}
	_, duplicate := coll.InsertOne(ctx, bson.M{"_id": "a"})
	noDocument := coll.FindOne(ctx, bson.M{"_id": "missing"}).Err()
	_, badUpdate := coll.UpdateOne(ctx, bson.M{"_id": "a"}, bson.M{"$nosuchoperator": bson.M{"x": 1}})
	m.Stop()
	// The first command after the stop meets the closed pooled connection
	// (a network error); the next ones find no server to select.
	_, closedConn := coll.InsertOne(ctx, bson.M{"_id": "b"})
	noServer := coll.FindOne(ctx, bson.M{"_id": "a"}).Err()
	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	callerDeadline := coll.FindOne(dctx, bson.M{"_id": "a"}).Err()
	cancel()
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancel)
	callerCancelled := coll.FindOne(cctx, bson.M{"_id": "a"}).Err()
	if err := client.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	disconnected := coll.FindOne(ctx, bson.M{"_id": "a"}).Err()

	// NATS: a live server's answers first, then the server shuts down.
	ns := testkit.NewNATS(t)
	nc, err := nats.Connect(ns.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, streamNotFound := js.Stream(ctx, "NO_SUCH_STREAM")
	noResponders := nc.Publish("x", nil) // a plain publish has no responder to miss: nil
	_, noResponders = nc.Request("nobody.listens", nil, time.Second)
	ns.Shutdown()
	testkit.Eventually(t, 5*time.Second, func() bool { return !nc.IsConnected() }, "client sees the server gone")
	// A request while the client reconnects waits for its timeout.
	_, reconnecting := nc.Request("am.x", nil, 200*time.Millisecond)
	nc.Close()
	_, closed := js.Publish(ctx, "am.evt.x", nil)

	for _, tc := range []struct {
		name       string
		err        error
		dependency string // "" means not an outage
	}{
		{"mongo duplicate key", duplicate, ""},
		{"mongo no document", noDocument, ""},
		{"mongo command refused by a live server", badUpdate, ""},
		{"mongo connection closed by the stopped server", closedConn, outage.Mongo},
		{"mongo no server to select", noServer, outage.Mongo},
		{"mongo caller's deadline while no server answers", callerDeadline, outage.Mongo},
		{"mongo caller cancelled", callerCancelled, ""},
		{"mongo client disconnected", disconnected, outage.Mongo},
		{"mongo error wrapped by a store", fmt.Errorf("store: load run: %w", noServer), outage.Mongo},
		{"nats stream not found", streamNotFound, ""},
		{"nats no responders", noResponders, outage.NATS},
		{"nats server gone, client reconnecting", reconnecting, outage.NATS},
		{"nats connection closed", closed, outage.NATS},
		{"plain error", errors.New("boom"), ""},
		{"context deadline alone", context.DeadlineExceeded, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the driver returned no error")
			}
			o := outage.Find(tc.err)
			if tc.dependency == "" {
				if o != nil {
					t.Fatalf("Find(%v) = %v, want no outage", tc.err, o)
				}
				if _, ok := outage.Mark(tc.err).(*outage.Error); ok {
					t.Fatalf("Mark marked a non-outage: %v", tc.err)
				}
				return
			}
			if o == nil {
				t.Fatalf("Find(%T %v) = nil, want a %s outage", tc.err, tc.err, tc.dependency)
			}
			if o.Dependency != tc.dependency || o.Err.Error() != tc.err.Error() {
				t.Fatalf("Find = %+v, want dependency %s wrapping the driver's error", o, tc.dependency)
			}
			marked := outage.Mark(tc.err)
			if outage.Mark(marked) != marked {
				t.Fatal("Mark wrapped an outage twice")
			}
			checkStatus(t, fmt.Errorf("service: %w", marked), tc.dependency, m.URI())
		})
	}
}

// checkStatus fails unless err carries, through its wrapping, Unavailable
// with the outage reason naming dependency, and a message without the
// driver's text (which quotes addresses such as uri's).
func checkStatus(t *testing.T, err error, dependency, uri string) {
	t.Helper()
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		t.Fatalf("%v carries no status", err)
	}
	st := se.GRPCStatus()
	if st.Code() != codes.Unavailable {
		t.Fatalf("code %s, want Unavailable", st.Code())
	}
	host := strings.TrimSuffix(strings.TrimPrefix(uri, "mongodb://"), "/")
	if strings.Contains(st.Message(), host) || strings.Contains(st.Message(), "server selection") || !strings.Contains(st.Message(), dependency) {
		t.Fatalf("message %q: want the dependency named and nothing of the driver's text", st.Message())
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info.GetReason() != outage.Reason || info.GetMetadata()["dependency"] != dependency {
		t.Fatalf("ErrorInfo %v, want reason %s naming %s", info, outage.Reason, dependency)
	}
}
