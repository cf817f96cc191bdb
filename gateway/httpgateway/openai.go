package httpgateway

import (
	"fmt"
	"net/http"

	"google.golang.org/grpc/metadata"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/services/modelgateway/openaiapi"
)

// openAIHandler serves the OpenAI-compatible API under openaiapi.Prefix,
// behind the same API keys and body limits as the rest of the gateway but
// answering their failures as OpenAI error objects, which OpenAI's SDKs
// parse. The SDKs send their key as Authorization: Bearer, which
// authentication takes (X-API-Key, when present, still wins).
func (g *gateway) openAIHandler() (http.Handler, error) {
	h, err := openaiapi.New(openaiapi.Options{
		Client: modelv1.NewModelServiceClient(g.backends.Model),
		Caller: func(r *http.Request) (openaiapi.Caller, bool) {
			p, ok := principalFrom(r.Context())
			return openaiapi.Caller{Tenant: p.Tenant, Project: p.Project, Key: p.Caller}, ok
		},
		Metadata:  func(r *http.Request) metadata.MD { return requestMetadata(r.Context(), r) },
		KeepAlive: g.cfg.SSEKeepAlive,
		Log:       g.log,
		Peers:     openaiapi.DNSPeers(g.cfg.Peers),
	})
	if err != nil {
		return nil, fmt.Errorf("httpgateway: %w", err)
	}
	return g.authenticateAs(openaiapi.WriteStatus, g.readBodyAs(openaiapi.WriteStatus, h)), nil
}
