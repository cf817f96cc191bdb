// Command classifier runs the agentmesh classifier service as its own process,
// configured by environment variables.
package main

import (
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/services/classifier/classifier"
)

func main() {
	service.Main(classifier.Name, &classifier.Config{}, classifier.Run)
}
