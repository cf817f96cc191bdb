module github.com/agentmesh/agentmesh/services/classifier

go 1.26

require (
	github.com/agentmesh/agentmesh/libs v0.0.0
	// Tests only: they start the real model gateway in-process.
	github.com/agentmesh/agentmesh/services/modelgateway v0.0.0
)

replace (
	github.com/agentmesh/agentmesh/libs => ../../libs
	github.com/agentmesh/agentmesh/services/modelgateway => ../../services/modelgateway
)
