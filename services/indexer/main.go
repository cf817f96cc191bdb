// Command indexer runs the agentmesh indexer service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
)

func main() {
	service.Main(indexer.Name, &indexer.Config{}, indexer.Run)
}
