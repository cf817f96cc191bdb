package openaiapi

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// embeddingList is the response of POST /embeddings.
type embeddingList struct {
	Object string          `json:"object"`
	Data   []embeddingItem `json:"data"`
	Model  string          `json:"model"`
	Usage  embeddingUsage  `json:"usage"`
}

type embeddingItem struct {
	Object string `json:"object"`
	Index  int    `json:"index"`
	// Embedding is a []float32, or its base64 text when asked for.
	Embedding any `json:"embedding"`
}

type embeddingUsage struct {
	PromptTokens int64 `json:"prompt_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// decodeEmbeddings reads an embeddings request. Token-id inputs are
// refused: the mesh's providers take text.
func decodeEmbeddings(body []byte) (req *modelv1.EmbedRequest, base64Out bool, err error) {
	o, err := parseObject(body, "")
	if err != nil {
		return nil, false, err
	}
	req = &modelv1.EmbedRequest{}
	model, ok, err := o.str("model")
	if err != nil {
		return nil, false, err
	}
	if !ok || model == "" {
		return nil, false, badParam("model", "is required")
	}
	req.Model = model
	inputs, ok, err := o.strings("input", " (token-id inputs are not supported)")
	if err != nil {
		return nil, false, err
	}
	if !ok || len(inputs) == 0 {
		return nil, false, badParam("input", "is required and must hold at least one text")
	}
	req.Inputs = inputs
	format, ok, err := o.str("encoding_format")
	if err != nil {
		return nil, false, err
	}
	if ok && format != "float" && format != "base64" {
		return nil, false, badParam("encoding_format", "must be float or base64, got %q", format)
	}
	dims, err := o.integer("dimensions")
	if err != nil {
		return nil, false, err
	}
	if dims != nil {
		if *dims < 1 || *dims > 65536 {
			return nil, false, badParam("dimensions", "must be between 1 and 65536, got %d", *dims)
		}
		req.Dimensions = int32(*dims)
	}
	if _, _, err := o.str("user"); err != nil {
		return nil, false, err
	}
	return req, format == "base64", nil
}

// embeddings serves POST /embeddings.
func (h *Handler) embeddings(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req, b64, err := decodeEmbeddings(body)
	if err != nil {
		h.count(r, "embeddings", err)
		h.fail(w, r, err)
		return
	}
	resp, err := h.opts.Client.Embed(h.outgoing(r), req)
	h.count(r, "embeddings", err)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.usage.add(h.caller(r), req.GetModel(), resp.GetUsage())
	out := embeddingList{Object: "list", Model: req.GetModel(), Data: make([]embeddingItem, 0, len(resp.GetEmbeddings())),
		Usage: embeddingUsage{PromptTokens: resp.GetUsage().GetPromptTokens(), TotalTokens: resp.GetUsage().GetPromptTokens()}}
	if t := resp.GetUsage().GetTotalTokens(); t > 0 {
		out.Usage.TotalTokens = t
	}
	for i, e := range resp.GetEmbeddings() {
		item := embeddingItem{Object: "embedding", Index: i, Embedding: e.GetValues()}
		if b64 {
			item.Embedding = float32Base64(e.GetValues())
		}
		out.Data = append(out.Data, item)
	}
	setProvider(w, resp.GetProvider(), resp.GetProviderModel())
	writeJSON(w, out)
}

// float32Base64 encodes a vector as OpenAI's base64 format does: the
// little-endian IEEE 754 bytes of each float32, in order.
func float32Base64(v []float32) string {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
