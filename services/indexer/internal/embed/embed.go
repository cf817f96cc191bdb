// Package embed turns chunk text into vectors: a built-in local embedder for
// machines with no embedding model, and one that calls the model gateway's
// Embed in batches.
package embed

import (
	"context"
	"errors"
	"fmt"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// Embedder turns texts into vectors. Implementations are safe for
// concurrent use.
type Embedder interface {
	// Name identifies the vector space: vectors of two embedders with
	// different names are not comparable, so an index built with one must
	// be rebuilt for the other.
	Name() string
	// Dimensions is the length of every vector.
	Dimensions() int
	// Embed returns one vector per text, in order.
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// ModelGateway embeds through ModelService.Embed with a logical model
// name, in batches.
type ModelGateway struct {
	client modelv1.ModelServiceClient
	model  string
	dims   int
	batch  int
}

var _ Embedder = (*ModelGateway)(nil)

// NewModelGateway returns an embedder calling client with the logical model
// (e.g. "embed"), asking for dims dimensions, batch texts per call.
func NewModelGateway(client modelv1.ModelServiceClient, model string, dims, batch int) (*ModelGateway, error) {
	if client == nil || model == "" || dims <= 0 {
		return nil, errors.New("embed: model gateway embedder needs a client, a model and dimensions")
	}
	if batch <= 0 {
		batch = 64
	}
	return &ModelGateway{client: client, model: model, dims: dims, batch: batch}, nil
}

// Name is "modelgateway/<model>/<dims>".
func (m *ModelGateway) Name() string { return fmt.Sprintf("modelgateway/%s/%d", m.model, m.dims) }

// Dimensions returns the configured dimensions.
func (m *ModelGateway) Dimensions() int { return m.dims }

// Embed calls the gateway once per batch and checks that every vector has
// the configured dimensions.
func (m *ModelGateway) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += m.batch {
		end := min(start+m.batch, len(texts))
		resp, err := m.client.Embed(ctx, &modelv1.EmbedRequest{Model: m.model, Inputs: texts[start:end], Dimensions: int32(m.dims)})
		if err != nil {
			return nil, fmt.Errorf("embed: model gateway: %w", err)
		}
		if len(resp.GetEmbeddings()) != end-start {
			return nil, fmt.Errorf("embed: model gateway returned %d vectors for %d texts", len(resp.GetEmbeddings()), end-start)
		}
		for i, e := range resp.GetEmbeddings() {
			if len(e.GetValues()) != m.dims {
				return nil, fmt.Errorf("embed: model gateway returned %d dimensions for text %d, want %d", len(e.GetValues()), start+i, m.dims)
			}
			out = append(out, e.GetValues())
		}
	}
	return out, nil
}
