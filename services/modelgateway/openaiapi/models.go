package openaiapi

import (
	"net/http"

	"google.golang.org/grpc/codes"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// modelObject is OpenAI's model object for one logical model. Available
// is the mesh's own: whether a provider of its chain can serve it now.
type modelObject struct {
	ID        string `json:"id"`
	Object    string `json:"object"`
	Created   int64  `json:"created"`
	OwnedBy   string `json:"owned_by"`
	Available bool   `json:"available"`
}

type modelList struct {
	Object string        `json:"object"`
	Data   []modelObject `json:"data"`
}

func (h *Handler) modelObject(m *modelv1.LogicalModel) modelObject {
	// Logical models exist from configuration; the gateway's start is the
	// nearest thing to a creation time this replica knows.
	return modelObject{ID: m.GetName(), Object: "model", Created: h.started.Unix(), OwnedBy: "agentmesh", Available: m.GetAvailable()}
}

// models serves GET /models: every logical model, available or not.
func (h *Handler) models(w http.ResponseWriter, r *http.Request) {
	resp, err := h.opts.Client.ListModels(h.outgoing(r), &modelv1.ListModelsRequest{})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	out := modelList{Object: "list", Data: make([]modelObject, 0, len(resp.GetModels()))}
	for _, m := range resp.GetModels() {
		out.Data = append(out.Data, h.modelObject(m))
	}
	writeJSON(w, out)
}

// model serves GET /models/{model}.
func (h *Handler) model(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("model")
	resp, err := h.opts.Client.ListModels(h.outgoing(r), &modelv1.ListModelsRequest{})
	if err != nil {
		h.fail(w, r, err)
		return
	}
	for _, m := range resp.GetModels() {
		if m.GetName() == id {
			writeJSON(w, h.modelObject(m))
			return
		}
	}
	h.fail(w, r, grpcx.Errorf(codes.NotFound, "UNKNOWN_MODEL", "model %q does not exist", id))
}
