// Command orchestrator runs the agentmesh orchestrator service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/orchestrator/orchestrator"
)

func main() {
	service.Main(orchestrator.Name, &orchestrator.Config{}, orchestrator.Run)
}
