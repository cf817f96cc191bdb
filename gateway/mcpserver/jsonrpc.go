package mcpserver

import (
	"encoding/json"
	"strings"
)

// JSON-RPC 2.0's error codes for messages that are not requests.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
)

// CheckMessage says why msg (one line of stdio, one HTTP body) is not a
// JSON-RPC 2.0 message or batch: a JSON-RPC error code, the message's id
// (nil when it has none) and a message; code 0 when it is one. The SDK's
// transports end a stdio session at such a line and answer HTTP with plain
// text, where a client expects a JSON-RPC error.
func CheckMessage(msg []byte) (code int, id any, message string) {
	var v any
	if err := json.Unmarshal(msg, &v); err != nil {
		return CodeParseError, nil, "Parse error: " + err.Error()
	}
	one := func(v any) (int, any, string) {
		m, ok := v.(map[string]any)
		if !ok {
			return CodeInvalidRequest, nil, "Invalid Request: a JSON-RPC message is an object"
		}
		if m["jsonrpc"] != "2.0" {
			return CodeInvalidRequest, m["id"], `Invalid Request: "jsonrpc" must be "2.0"`
		}
		return 0, nil, ""
	}
	if batch, ok := v.([]any); ok {
		if len(batch) == 0 {
			return CodeInvalidRequest, nil, "Invalid Request: an empty batch"
		}
		for _, e := range batch {
			if code, id, message := one(e); code != 0 {
				return code, id, message
			}
		}
		return 0, nil, ""
	}
	return one(v)
}

// ErrorResponse is JSON-RPC's error response to the message with id (nil:
// none could be read).
func ErrorResponse(code int, id any, message string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": message}})
	return b
}

// RequestID is the id of the JSON-RPC request msg, nil when it has none
// (a notification, a batch, not JSON).
func RequestID(msg []byte) any {
	var m struct {
		ID any `json:"id"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return nil
	}
	return m.ID
}

// ErrorCodeOf picks the JSON-RPC code for a refusal the SDK words in plain
// text: a method it does not serve, else an invalid request.
func ErrorCodeOf(text string) int {
	if strings.Contains(text, "not handled") || strings.Contains(text, "unsupported") || strings.Contains(text, "method not found") {
		return CodeMethodNotFound
	}
	return CodeInvalidRequest
}
