package openaiapi_test

import (
	"bufio"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// streamLines returns the non-empty lines of an SSE body: comments and
// data lines, in order.
func streamLines(t *testing.T, resp *http.Response) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// A model that stays silent past GATEWAY_SSE_KEEPALIVE gets keep-alive
// comments, before its first chunk (the stream then starts with 200, and a
// failure becomes an error event) and between chunks; a model that answers
// at once gets none.
func TestChatStreamKeepAlive(t *testing.T) {
	t.Parallel()
	atEachDoor(t, func(t *testing.T, d door) {
		m := startMeshWith(t, d, httpgateway.Config{APIKeys: apiKeys, SSEKeepAlive: 100 * time.Millisecond})
		m.sim.When(providersim.Match{LastUserContains: "slow marker"}).Delay(450 * time.Millisecond).Text("late answer")
		m.sim.When(providersim.Match{LastUserContains: "slow failure marker"}).Delay(450*time.Millisecond).Error(429, "slow down")
		m.sim.When(providersim.Match{LastUserContains: "hang marker"}).Text("first words and then nothing").Hang()
		req := func(marker string) *http.Response {
			return open(t, http.MethodPost, m.base+"/chat/completions", aliceKey,
				`{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "`+marker+`"}]}`)
		}
		keepAlives := func(lines []string) int {
			n := 0
			for _, l := range lines {
				if l == ": keep-alive" {
					n++
				}
			}
			return n
		}

		resp := req("slow marker")
		lines := streamLines(t, resp)
		resp.Body.Close()
		first := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "data: ") })
		if resp.StatusCode != http.StatusOK || first < 2 || keepAlives(lines[:first]) != first || lines[len(lines)-1] != "data: [DONE]" ||
			!strings.Contains(lines[first], `"content":"late ans`) {
			t.Errorf("slow model: status %d, lines %q", resp.StatusCode, lines)
		}

		resp = req("slow failure marker")
		lines = streamLines(t, resp)
		resp.Body.Close()
		last := lines[len(lines)-1]
		if resp.StatusCode != http.StatusOK || keepAlives(lines) < 2 || !strings.HasPrefix(last, "data: {\"error\"") ||
			!strings.Contains(last, "rate_limit_error") || slices.Contains(lines, "data: [DONE]") {
			t.Errorf("slow failure: status %d, lines %q", resp.StatusCode, lines)
		}

		resp = req("hang marker")
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var seen []string
		for sc.Scan() && keepAlives(seen) < 2 {
			if l := sc.Text(); l != "" {
				seen = append(seen, l)
			}
		}
		if len(seen) < 3 || !strings.HasPrefix(seen[0], "data: ") || keepAlives(seen[1:]) < 2 {
			t.Errorf("silent after the first chunk: %q", seen)
		}

		resp = req("quick marker")
		lines = streamLines(t, resp)
		resp.Body.Close()
		if keepAlives(lines) != 0 || lines[len(lines)-1] != "data: [DONE]" {
			t.Errorf("a quick answer got keep-alives: %q", lines)
		}
	})
}
