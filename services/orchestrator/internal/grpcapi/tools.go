package grpcapi

import (
	"context"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/tools"
)

// Tools implements orchestratorv1.ToolServiceServer.
type Tools struct {
	orchestratorv1.UnimplementedToolServiceServer
	registry *tools.Registry
}

var _ orchestratorv1.ToolServiceServer = (*Tools)(nil)

// NewTools returns the service listing registry's tools.
func NewTools(registry *tools.Registry) *Tools { return &Tools{registry: registry} }

// ListTools implements orchestratorv1.ToolServiceServer.
func (s *Tools) ListTools(context.Context, *orchestratorv1.ListToolsRequest) (*orchestratorv1.ListToolsResponse, error) {
	resp := &orchestratorv1.ListToolsResponse{}
	for _, d := range s.registry.Definitions() {
		resp.Tools = append(resp.Tools, &orchestratorv1.ToolDefinition{Name: d.Name, Description: d.Description, ParametersJsonSchema: d.Schema})
	}
	return resp, nil
}
