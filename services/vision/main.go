// Command vision runs the agentmesh vision service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

func main() {
	service.Main(vision.Name, &vision.Config{}, vision.Run)
}
