package openaiapi

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecodeChatTwentyTools decodes a chat request with twenty tools,
// as agent frameworks send with every request of a conversation.
func BenchmarkDecodeChatTwentyTools(b *testing.B) {
	var tools []string
	for i := range 20 {
		tools = append(tools, fmt.Sprintf(`{"type":"function","function":{"name":"tool_%d","description":"d","parameters":{"type":"object","properties":{"q":{"type":"string","minLength":1},"n":{"type":"integer","minimum":0}},"required":["q"]}}}`, i))
	}
	body := []byte(`{"model":"chat","messages":[{"role":"user","content":"hi"}],"tools":[` + strings.Join(tools, ",") + `]}`)
	for b.Loop() {
		if _, err := decodeChat(body); err != nil {
			b.Fatal(err)
		}
	}
}
