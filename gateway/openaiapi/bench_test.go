package openaiapi_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkChatCompletion sends one unary chat completion per iteration
// through each door (the REST gateway or the model gateway's own listener)
// in front of the real model gateway and provider simulator, as
// an OpenAI client would: the whole path's cost in one process, for CPU
// profiles of the API's share (go test -bench ChatCompletion -cpuprofile).
func BenchmarkChatCompletion(b *testing.B) {
	for _, d := range []door{restDoor, modelDoor} {
		b.Run(string(d), func(b *testing.B) { benchmarkChatCompletion(b, d) })
	}
}

func benchmarkChatCompletion(b *testing.B, d door) {
	m := startMesh(b, d)
	body := `{"model": "chat", "messages": [{"role": "system", "content": "You are a concise financial analyst."},
		{"role": "user", "content": "Summarise the quarter in one sentence."}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, m.base+"/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+aliceKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}
