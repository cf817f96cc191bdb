// Command modelgateway runs the agentmesh modelgateway service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgateway"
)

func main() {
	modelgateway.TuneGC()
	service.Main(modelgateway.Name, &modelgateway.Config{}, modelgateway.Run)
}
