package classifier

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/config"
	"github.com/agentmesh/agentmesh/libs/events"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/checkpoint"
	"github.com/agentmesh/agentmesh/services/classifier/internal/conversations"
	"github.com/agentmesh/agentmesh/services/classifier/internal/labels"
	"github.com/agentmesh/agentmesh/services/classifier/internal/meshtest"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runevents"
	"github.com/agentmesh/agentmesh/services/classifier/internal/runner"
	"github.com/agentmesh/agentmesh/services/classifier/internal/statemachine"
)

// testScope is the scope every service test works in.
var testScope = &commonv1.Scope{TenantId: "acme", ProjectId: "support"}

// infra is what a classifier process connects to: a database, NATS and the
// model gateway in front of the provider simulator.
type infra struct {
	mongoURI, dbName string
	db               *mongo.Database
	natsURL          string
	models           *meshtest.Models
}

func newInfra(t *testing.T) *infra {
	t.Helper()
	uri, name := testkit.MongoURI(t)
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return &infra{mongoURI: uri, dbName: name, db: client.Database(name), natsURL: testkit.NewNATS(t).URL(), models: meshtest.StartModels(t)}
}

// env is the classifier's environment for this infrastructure, with small
// run limits the tests override per case.
func (in *infra) env(over map[string]string) map[string]string {
	vars := map[string]string{
		"MONGO_URI":                  in.mongoURI,
		"MONGO_DATABASE":             in.dbName,
		"NATS_URL":                   in.natsURL,
		"MODELGATEWAY_ADDR":          in.models.Addr,
		"CLASSIFIER_MAX_MODEL_CALLS": "20",
		"CLASSIFIER_MAX_PLANS":       "5",
		"CLASSIFIER_MAX_BATCH":       "4",
		"CLASSIFIER_BATCH_SIZE":      "2",
		"CLASSIFIER_CHUNK_SIZE":      "40",
		"CLASSIFIER_LEASE_TTL":       "2s",
	}
	for k, v := range over {
		vars[k] = v
	}
	return vars
}

// svc is a classifier started in-process with run.
type svc struct {
	client classifierv1.ClassifierServiceClient
	addr   string // gRPC address
	stop   func()
}

// startService runs the classifier in this process; it stops in t.Cleanup
// (or earlier with stop).
func startService(t *testing.T, in *infra, over map[string]string, hook runner.Hook) *svc {
	t.Helper()
	var cfg Config
	if err := config.Load("", &cfg, config.Map(in.env(over))); err != nil {
		t.Fatalf("config: %v", err)
	}
	running := testkit.StartService(t, "classifier", func(ctx context.Context, rt service.Runtime) error {
		rt.Logger = testLogger(t)
		return run(ctx, &cfg, rt, hook)
	})
	conn, err := grpc.NewClient(running.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	stop := func() {
		_ = conn.Close()
		running.Stop()
	}
	t.Cleanup(stop)
	return &svc{client: classifierv1.NewClassifierServiceClient(conn), addr: running.Addr, stop: stop}
}

// testLogger writes the service's logs to the test log with -v.
func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() && os.Getenv("CLASSIFIER_TEST_LOGS") != "" {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sampleConversations returns the embedded sample set.
func sampleConversations(t *testing.T) []conversations.Conversation {
	t.Helper()
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	return sample
}

// importSample loads the embedded sample conversations through the API and
// returns their ids in id order.
func importSample(t *testing.T, c classifierv1.ClassifierServiceClient) []string {
	t.Helper()
	sample, err := conversations.Sample()
	if err != nil {
		t.Fatal(err)
	}
	req := &classifierv1.ImportConversationsRequest{Scope: testScope}
	var ids []string
	for _, cv := range sample {
		req.Conversations = append(req.Conversations, cv.Proto())
		ids = append(ids, cv.ID)
	}
	resp, err := c.ImportConversations(testCtx(t), req)
	if err != nil {
		t.Fatalf("ImportConversations: %v", err)
	}
	if int(resp.GetImported()) != len(sample) || len(resp.GetRejected()) != 0 {
		t.Fatalf("imported %d of %d, rejected %v", resp.GetImported(), len(sample), resp.GetRejected())
	}
	sort.Strings(ids)
	return ids
}

// sampleLabels is the scripted truth: every third conversation UNRESOLVED.
func sampleLabels(ids []string) map[string]string {
	out := map[string]string{}
	for i, id := range ids {
		out[id] = "RESOLVED"
		if i%3 == 2 {
			out[id] = "UNRESOLVED"
		}
	}
	return out
}

// eventStream is any of the three event-streaming RPC clients.
type eventStream[T interface{ GetEvent() *classifierv1.RunEvent }] interface {
	Recv() (T, error)
}

// drain reads a stream to its end and returns the events and the final
// error (nil for a clean end).
func drain[T interface{ GetEvent() *classifierv1.RunEvent }](s eventStream[T]) ([]*classifierv1.RunEvent, error) {
	var out []*classifierv1.RunEvent
	for {
		m, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, m.GetEvent())
	}
}

func startRun(t *testing.T, c classifierv1.ClassifierServiceClient, instruction string) (string, []*classifierv1.RunEvent) {
	t.Helper()
	st, err := c.StartRun(testCtx(t), &classifierv1.StartRunRequest{Scope: testScope, Instruction: instruction})
	if err != nil {
		t.Fatalf("StartRun: %v", err)
	}
	evs, err := drain(st)
	if err != nil {
		t.Fatalf("StartRun stream: %v (events %v)", err, types(evs))
	}
	if len(evs) == 0 {
		t.Fatal("StartRun streamed no events")
	}
	return evs[0].GetRunId(), evs
}

func command(c classifierv1.ClassifierServiceClient, ctx context.Context, runID string, typ classifierv1.CommandType, feedback string) ([]*classifierv1.RunEvent, error) {
	st, err := c.SendCommand(ctx, &classifierv1.SendCommandRequest{Scope: testScope, RunId: runID, Type: typ, Feedback: feedback})
	if err != nil {
		return nil, err
	}
	return drain(st)
}

func mustCommand(t *testing.T, c classifierv1.ClassifierServiceClient, runID string, typ classifierv1.CommandType, feedback string) []*classifierv1.RunEvent {
	t.Helper()
	evs, err := command(c, testCtx(t), runID, typ, feedback)
	if err != nil {
		t.Fatalf("SendCommand %s: %v (events %v)", typ, err, types(evs))
	}
	return evs
}

func resume(c classifierv1.ClassifierServiceClient, ctx context.Context, runID string) ([]*classifierv1.RunEvent, error) {
	st, err := c.ResumeRun(ctx, &classifierv1.ResumeRunRequest{Scope: testScope, RunId: runID})
	if err != nil {
		return nil, err
	}
	return drain(st)
}

func getRun(t *testing.T, c classifierv1.ClassifierServiceClient, runID string) *classifierv1.Run {
	t.Helper()
	resp, err := c.GetRun(testCtx(t), &classifierv1.GetRunRequest{Scope: testScope, RunId: runID})
	if err != nil {
		t.Fatalf("GetRun: %v", err)
	}
	return resp.GetRun()
}

func types(evs []*classifierv1.RunEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.GetType()
	}
	return out
}

// last returns the last event of type typ, failing the test if none.
func last(t *testing.T, evs []*classifierv1.RunEvent, typ string) *classifierv1.RunEvent {
	t.Helper()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].GetType() == typ {
			return evs[i]
		}
	}
	t.Fatalf("no %s event in %v", typ, types(evs))
	return nil
}

func has(evs []*classifierv1.RunEvent, typ string) bool {
	for _, e := range evs {
		if e.GetType() == typ {
			return true
		}
	}
	return false
}

// data returns an event's data as Go values.
func data(e *classifierv1.RunEvent) any { return e.GetData().AsInterface() }

func field(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(x) {
				t.Fatalf("no index %s in %v", p, x)
			}
			v = x[i]
		default:
			t.Fatalf("no field %s in %v", p, v)
		}
	}
	return v
}

// savedLabels returns the run's stored labels as id → label, found by
// run (the service reads them by the ids its checkpoint records).
func savedLabels(t *testing.T, db *mongo.Database, runID string) map[string]string {
	t.Helper()
	cur, err := db.Collection(labels.Collection).Find(testCtx(t), bson.D{{Key: "tenant_id", Value: testScope.GetTenantId()}, {Key: "project_id", Value: testScope.GetProjectId()}, {Key: "run_id", Value: runID}})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ConversationID string `bson:"conversation_id"`
		Label          string `bson:"label"`
	}
	if err := cur.All(testCtx(t), &docs); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range docs {
		out[d.ConversationID] = d.Label
	}
	return out
}

// labelDocs counts the run's label documents (a duplicate would show here).
func labelDocs(t *testing.T, db *mongo.Database, runID string) int64 {
	t.Helper()
	n, err := db.Collection(labels.Collection).CountDocuments(testCtx(t), bson.D{{Key: "run_id", Value: runID}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// replayAll reads every event of a run from JetStream, as a reconnecting
// client would, until want events arrived.
func replayAll(t *testing.T, in *infra, runID string, afterSeq uint64, want int) []*classifierv1.RunEvent {
	t.Helper()
	bus, err := events.Connect(testCtx(t), in.natsURL, "replay-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*classifierv1.RunEvent
	errDone := errors.New("done")
	err = bus.Replay(ctx, events.StreamEvents, runevents.SubjectFilter(testScope.GetTenantId(), runID), afterSeq,
		func(_ uint64, env *commonv1.Event) error {
			ev, err := runevents.Decode(env)
			if err != nil {
				return err
			}
			out = append(out, ev)
			if len(out) == want {
				return errDone
			}
			return nil
		})
	if !errors.Is(err, errDone) {
		t.Fatalf("replay: %v after %d of %d events", err, len(out), want)
	}
	return out
}

// holdHook returns a hook that blocks the first time a run enters state,
// signalling entered, until release is closed.
func holdHook(state statemachine.State) (hook runner.Hook, entered <-chan string, release chan<- struct{}) {
	in := make(chan string, 1)
	rel := make(chan struct{})
	var once sync.Once
	return func(_ context.Context, runID string, s statemachine.State) {
		if s != state {
			return
		}
		held := false
		once.Do(func() { held = true })
		if !held {
			return
		}
		in <- runID
		<-rel
	}, in, rel
}

// pendingOutbox counts the run's events not yet published.
func pendingOutbox(t *testing.T, in *infra, runID string) int {
	t.Helper()
	var doc struct {
		Outbox []bson.Raw `bson:"outbox"`
	}
	err := in.db.Collection(checkpoint.Collection).FindOne(testCtx(t), bson.D{{Key: "_id", Value: runID}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return 0 // archived: everything was published
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(doc.Outbox)
}

// countEvents counts the run's events stored in JetStream.
func countEvents(t *testing.T, in *infra, runID string) int {
	t.Helper()
	n := 0
	for _, c := range runSubjects(t, in, runID) {
		n += int(c)
	}
	return n
}

// runSubjects returns the subjects the run's events are stored on in
// JetStream, with how many each holds.
func runSubjects(t *testing.T, in *infra, runID string) map[string]uint64 {
	t.Helper()
	bus, err := events.Connect(testCtx(t), in.natsURL, "count-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	st, err := bus.JetStream().Stream(testCtx(t), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(testCtx(t), jetstream.WithSubjectFilter(runevents.SubjectFilter(testScope.GetTenantId(), runID)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects
}
