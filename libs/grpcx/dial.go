package grpcx

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// retriedMethods are the methods a client retries when they fail with
// UNAVAILABLE: reads, which change nothing however often they run. A write
// (SendCommand, SubmitAnalysis, StreamMessage, IngestDocument, ...) may
// have been applied by a replica that died before answering, so retrying
// it could apply it twice (approve the next batch, ingest twice); gRPC's
// transparent retry still covers calls that never reached a server. Model
// calls are not retried here either: the model gateway retries upstream
// itself, and a second layer would multiply its attempts; only a model
// call that lost its connection is sent again (connectionLossRetried).
var retriedMethods = map[string][]string{
	"agentmesh.model.v1.ModelService":               {"ListModels", "Embed"},
	"agentmesh.orchestrator.v1.ConversationService": {"GetConversation", "ListConversations"},
	"agentmesh.orchestrator.v1.JobService":          {"GetJob", "ListJobs", "WatchJob"},
	"agentmesh.orchestrator.v1.ToolService":         {"ListTools"},
	"agentmesh.indexer.v1.DocumentService":          {"GetDocument", "ListDocuments", "FindDocumentsByExtract", "GetExtractionJob"},
	"agentmesh.indexer.v1.SearchService":            {"Search"},
	"agentmesh.indexer.v1.GraphService":             {"GetNode", "ListNeighbors", "FindPath"},
	"agentmesh.classifier.v1.ClassifierService":     {"GetRun", "ListRuns"},
	"agentmesh.sqlagent.v1.SqlAgentService":         {"ListConnections", "GetSession"},
	"grpc.health.v1.Health":                         {"Check"},
}

// retryServiceConfig asks for round-robin balancing over the resolved
// addresses (Kubernetes headless services) and retries the retriedMethods
// on UNAVAILABLE with exponential backoff.
var retryServiceConfig = func() string {
	type name struct {
		Service string `json:"service"`
		Method  string `json:"method"`
	}
	var names []name
	for svc, methods := range retriedMethods {
		for _, m := range methods {
			names = append(names, name{svc, m})
		}
	}
	slices.SortFunc(names, func(a, b name) int { return strings.Compare(a.Service+"/"+a.Method, b.Service+"/"+b.Method) })
	cfg := map[string]any{
		"loadBalancingConfig": []any{map[string]any{"round_robin": map[string]any{}}},
		"methodConfig": []any{map[string]any{
			"name":         names,
			"waitForReady": false,
			"retryPolicy": map[string]any{
				"maxAttempts":          4,
				"initialBackoff":       "0.1s",
				"maxBackoff":           "2s",
				"backoffMultiplier":    2.0,
				"retryableStatusCodes": []string{"UNAVAILABLE"},
			},
		}},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		panic(err) // a literal of plain values always marshals
	}
	return string(b)
}()

// Dial creates a client connection to target ("host:port" or any gRPC target
// such as "dns:///svc:9090") with OpenTelemetry stats, the mesh's retry
// service config and plaintext transport (the mesh runs behind the cluster
// network or a service mesh that adds mTLS). Model calls carry the scope
// they are made for (see WithScope), and are sent again when the replica
// serving them dies mid-call (see connectionLossRetried). Extra options are
// appended.
// The connection is lazy: it connects on first use.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		grpc.WithDefaultServiceConfig(retryServiceConfig),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(32 << 20)),
		grpc.WithInitialWindowSize(streamWindow),
		grpc.WithInitialConnWindowSize(connWindow),
		grpc.WithChainUnaryInterceptor(maskTransportUnary, forwardScopeUnary, retryConnectionLossUnary),
		grpc.WithChainStreamInterceptor(maskTransportStream, forwardScopeStream),
	}
	cc, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("grpcx: dial %s: %w", target, err)
	}
	return cc, nil
}
