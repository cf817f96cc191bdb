// Command sqlagent runs the agentmesh sqlagent service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/sqlagent/sqlagent"
)

func main() {
	service.Main(sqlagent.Name, &sqlagent.Config{}, sqlagent.Run)
}
