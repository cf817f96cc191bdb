package openapirules

import (
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
)

// ServiceFiles returns the proto files that declare the services the
// gateway serves, for Apply.
func ServiceFiles() (*protoregistry.Files, error) {
	files := new(protoregistry.Files)
	for _, fd := range []protoreflect.FileDescriptor{
		modelv1.File_agentmesh_model_v1_model_proto,
		orchestratorv1.File_agentmesh_orchestrator_v1_conversation_proto,
		orchestratorv1.File_agentmesh_orchestrator_v1_job_proto,
		visionv1.File_agentmesh_vision_v1_vision_proto,
		indexerv1.File_agentmesh_indexer_v1_document_proto,
		indexerv1.File_agentmesh_indexer_v1_search_proto,
		indexerv1.File_agentmesh_indexer_v1_graph_proto,
		classifierv1.File_agentmesh_classifier_v1_classifier_proto,
		sqlagentv1.File_agentmesh_sqlagent_v1_sqlagent_proto,
	} {
		if err := files.RegisterFile(fd); err != nil {
			return nil, err
		}
	}
	return files, nil
}
