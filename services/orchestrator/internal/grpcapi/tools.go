package grpcapi

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/mcptools"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// Tools implements orchestratorv1.ToolServiceServer.
type Tools struct {
	orchestratorv1.UnimplementedToolServiceServer
	registry *tools.Registry
	box      *mcptools.ChatToolbox // nil: no MCP servers
}

var _ orchestratorv1.ToolServiceServer = (*Tools)(nil)

// NewTools returns the service listing registry's tools and, when box is
// not nil, each tenant's MCP tools and servers.
func NewTools(registry *tools.Registry, box *mcptools.ChatToolbox) *Tools {
	return &Tools{registry: registry, box: box}
}

// ListTools implements orchestratorv1.ToolServiceServer. Without a tenant
// (neither in the request nor authenticated) it lists the built-in tools.
func (s *Tools) ListTools(ctx context.Context, req *orchestratorv1.ListToolsRequest) (*orchestratorv1.ListToolsResponse, error) {
	reg, tenant := s.registry, ""
	if req.GetScope().GetTenantId() != "" || authenticated(ctx) {
		scope, err := grpcx.Scope(ctx, req.GetScope())
		if err != nil {
			return nil, err
		}
		tenant = scope.GetTenantId()
	}
	if s.box != nil && tenant != "" {
		reg = s.box.Registry(ctx, tenant)
	}
	resp := &orchestratorv1.ListToolsResponse{}
	for _, d := range reg.Definitions() {
		resp.Tools = append(resp.Tools, &orchestratorv1.ToolDefinition{Name: d.Name, Description: d.Description, ParametersJsonSchema: d.Schema, McpServer: d.MCPServer})
	}
	if s.box != nil && tenant != "" {
		for _, st := range s.box.Status(tenant) {
			resp.McpServers = append(resp.McpServers, serverStatus(st))
		}
	}
	return resp, nil
}

// authenticated reports whether the gateway passed an authenticated tenant.
func authenticated(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(grpcx.TenantMetadataKey)
	return len(v) > 0 && strings.TrimSpace(v[0]) != ""
}

var serverStates = map[mcptools.State]orchestratorv1.McpServerState{
	mcptools.Disconnected: orchestratorv1.McpServerState_MCP_SERVER_STATE_DISCONNECTED,
	mcptools.Connecting:   orchestratorv1.McpServerState_MCP_SERVER_STATE_CONNECTING,
	mcptools.Ready:        orchestratorv1.McpServerState_MCP_SERVER_STATE_READY,
	mcptools.Failed:       orchestratorv1.McpServerState_MCP_SERVER_STATE_FAILED,
}

func serverStatus(st mcptools.ServerStatus) *orchestratorv1.McpServerStatus {
	out := &orchestratorv1.McpServerStatus{
		Name: st.Name, Transport: st.Transport, State: serverStates[st.State], ToolCount: int32(st.Tools),
		Error: st.Error, SkippedTools: st.Skipped,
	}
	if !st.ErrorTime.IsZero() {
		out.ErrorTime = timestamppb.New(st.ErrorTime)
	}
	if !st.ConnectTime.IsZero() {
		out.ConnectTime = timestamppb.New(st.ConnectTime)
	}
	return out
}
