package httpgateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
)

// TestRequestLineIsChecked: a path parameter or query value that is not
// UTF-8, a query parameter the route does not have, and a query value its
// parameter's type does not take (a number, a time, a sequence, an enum's
// name) are 400 naming the parameter as written, before any service sees
// them; known parameters under either their JSON or proto name pass.
func TestRequestLineIsChecked(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{}, fakes{conversations: &conversationFake{
		get: func(_ context.Context, r *orchestratorv1.GetConversationRequest) (*orchestratorv1.GetConversationResponse, error) {
			return &orchestratorv1.GetConversationResponse{Conversation: &orchestratorv1.Conversation{Id: r.GetConversationId()}}, nil
		},
		list: func(context.Context, *orchestratorv1.ListConversationsRequest) (*orchestratorv1.ListConversationsResponse, error) {
			return &orchestratorv1.ListConversationsResponse{}, nil
		},
	}, sql: &sqlFake{getJob: func(_ context.Context, r *sqlagentv1.GetSqlJobRequest) (*sqlagentv1.GetSqlJobResponse, error) {
		return &sqlagentv1.GetSqlJobResponse{Job: &sqlagentv1.SqlJob{Id: r.GetJobId()}}, nil
	}}})
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantMessage        string
	}{
		{"path parameter not UTF-8", "GET", "/v1/conversations/%ff%fe", 400, "conversationId: path parameter is not valid UTF-8"},
		{"verb route parameter not UTF-8", "GET", "/v1/jobs/%c3:watch", 400, "jobId: path parameter is not valid UTF-8"},
		{"query value not UTF-8", "GET", "/v1/conversations?caller=%ff", 400, "caller: query value is not valid UTF-8"},
		{"unknown query parameter", "GET", "/v1/conversations?pagesize=5", 400, "pagesize: unknown query parameter of GET /v1/conversations (known: caller, createTimeFrom, createTimeTo, pageSize, pageToken, scope.projectId, scope.tenantId)"},
		{"query on a body route", "POST", "/v1/conversations?title=x", 400, "title: unknown query parameter of POST /v1/conversations (it takes none)"},
		{"bad escape in the query", "GET", "/v1/conversations?caller=%zz", 400, "query: invalid URL escape"},
		{"unmatched path not UTF-8", "GET", "/v1/nowhere/%ff/x", 400, "path: is not valid UTF-8"},
		{"not a number", "GET", "/v1/conversations?pageSize=ten", 400, `pageSize: "ten" is not a whole number`},
		{"a number out of range", "GET", "/v1/conversations?page_size=99999999999", 400, `page_size: "99999999999" is not a whole number from -2147483648 to 2147483647`},
		{"not a time", "GET", "/v1/conversations?createTimeFrom=yesterday", 400, `createTimeFrom: "yesterday" is not a time: write it as RFC 3339`},
		{"not a sequence", "GET", "/v1/jobs/j1:watch?afterSequence=-1", 400, `afterSequence: "-1" is not a sequence number`},
		{"not a value of the enum", "GET", "/v1/jobs?status=DONE", 400, `status: "DONE" is not one of JOB_STATUS_UNSPECIFIED, JOB_STATUS_PENDING`},
		{"a time", "GET", "/v1/conversations?createTimeFrom=2026-11-27T09:30:00Z&createTimeTo=2026-11-28T00:00:00.5%2B01:00", 200, ""},
		{"JSON names", "GET", "/v1/conversations?pageSize=5&scope.projectId=p", 200, ""},
		{"proto names", "GET", "/v1/conversations?page_size=5&scope.project_id=p", 200, ""},
		{"path parameter with a colon", "GET", "/v1/conversations/a:b", 200, ""},
		{"lastEventId is the gateway's own", "GET", "/v1/conversations?lastEventId=3", 200, ""},
		{"unknown route", "GET", "/v1/nowhere", 404, ""},
		// A SQL job's id is "<session>/<n>": its parameter spans segments
		// ({job_id=*/**}) and its requests are checked like any other's.
		{"query value not UTF-8, id of two segments", "GET", "/v1/sql/jobs/s1/4?scope.projectId=%ff", 400, "scope.projectId: query value is not valid UTF-8"},
		{"unknown query parameter, id of two segments", "GET", "/v1/sql/jobs/s1/4?bogus=1", 400, "bogus: unknown query parameter of GET /v1/sql/jobs/{jobId}"},
		{"path parameter not UTF-8, id of two segments", "GET", "/v1/sql/jobs/s1/%ff", 400, "jobId: path parameter is not valid UTF-8"},
		{"id of two segments", "GET", "/v1/sql/jobs/s1/4?scope.projectId=p", 200, ""},
		{"HEAD, id of two segments", "HEAD", "/v1/sql/jobs/s1/4", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, body := do(t, tc.method, m.url+tc.path, "", nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantMessage == "" {
				return
			}
			var got struct{ Message string }
			if err := json.Unmarshal(body, &got); err != nil || !strings.HasPrefix(got.Message, tc.wantMessage) {
				t.Fatalf("message %q, want it to start with %q", got.Message, tc.wantMessage)
			}
		})
	}
}

// TestSlowBodyIsCutOff: a client that declares a body and stalls gets 408
// and a closed connection after GATEWAY_BODY_TIMEOUT, its handler goroutine
// ends, the service never sees the request, and shutdown is not held up by
// it; a stream that outlives the body timeout is not cut.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	streamed := make(chan struct{})
	m := startBackends(t, fakes{
		conversations: &conversationFake{
			create: func(context.Context, *orchestratorv1.CreateConversationRequest) (*orchestratorv1.CreateConversationResponse, error) {
				t.Error("a request whose body never came reached the service")
				return nil, nil
			},
		},
		jobs: &jobFake{watch: func(_ *orchestratorv1.WatchJobRequest, s grpc.ServerStreamingServer[orchestratorv1.WatchJobResponse]) error {
			// Two events 600 ms apart: longer than the body timeout.
			for i := range 2 {
				if err := s.Send(&orchestratorv1.WatchJobResponse{Sequence: uint64(i + 1)}); err != nil {
					return err
				}
				if i == 0 {
					time.Sleep(600 * time.Millisecond)
				}
			}
			close(streamed)
			return nil
		}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const timeout = 300 * time.Millisecond
	url, done := runGateway(t, ctx, m, httpgateway.Config{BodyTimeout: timeout, ShutdownTimeout: waitLimit})
	before := runtime.NumGoroutine()

	// Every route that reads a body: the REST API, MCP (mounted beside
	// it), the OpenAI-compatible API and uploads; an upload refused before
	// its body is read answers at once, and closes the connection rather
	// than wait for the rest.
	const part = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhel"
	for _, tc := range []struct {
		path, contentType, body string
		status                  int
	}{
		{"/v1/conversations", "application/json", `{"title"`, http.StatusRequestTimeout},
		{"/mcp", "application/json", `{"jsonrpc"`, http.StatusRequestTimeout},
		{"/openai/v1/chat/completions", "application/json", `{"model"`, http.StatusRequestTimeout},
		{"/v1/documents:upload", "multipart/form-data; boundary=b", part, http.StatusRequestTimeout},
		{"/v1/documents:upload", "application/json", `{"title"`, http.StatusBadRequest},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		if _, err := io.WriteString(conn, "POST "+tc.path+" HTTP/1.1\r\nHost: x\r\nContent-Type: "+tc.contentType+
			"\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n"+tc.body); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(waitLimit))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("POST %s (%s): no response to a stalled body: %v", tc.path, tc.contentType, err)
		}
		body, _ := io.ReadAll(resp.Body)
		elapsed := time.Since(start)
		want, wait := "not received within 300ms", timeout
		if tc.status != http.StatusRequestTimeout {
			want, wait = "", 0
		}
		if resp.StatusCode != tc.status || !strings.Contains(string(body), want) {
			t.Fatalf("POST %s (%s): status %d %s, want %d", tc.path, tc.contentType, resp.StatusCode, body, tc.status)
		}
		if elapsed < wait || elapsed > wait+2*time.Second {
			t.Fatalf("POST %s (%s): answered after %v, want about %v", tc.path, tc.contentType, elapsed, wait)
		}
		if _, err := conn.Read(make([]byte, 1)); err == nil {
			t.Fatalf("POST %s (%s): the connection stayed open after %d", tc.path, tc.contentType, tc.status)
		}
		t.Logf("POST %s (%s): stalled body answered %d after %v", tc.path, tc.contentType, tc.status, elapsed.Round(time.Millisecond))
	}

	// A stream runs past the body timeout undisturbed.
	sresp, err := http.Get(url + "/v1/jobs/j1:watch")
	if err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if n := strings.Count(string(all), "\nid: ") + strings.Count(string(all[:min(len(all), 4)]), "id: "); n != 2 {
		t.Fatalf("stream cut: %q", all)
	}
	waitFor(t, streamed, "the stream to finish")

	// Another stalled client, then shutdown: it must not wait for it.
	stalled, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_, _ = io.WriteString(stalled, "POST /v1/conversations HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n{")
	time.Sleep(50 * time.Millisecond) // let the server start reading the body
	stop := time.Now()
	cancel()
	if err := waitFor(t, done, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if d := time.Since(stop); d > timeout+2*time.Second {
		t.Fatalf("shutdown took %v with a stalled client", d)
	}
	deadline := time.Now().Add(waitLimit)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before+5 {
		t.Fatalf("%d goroutines, %d before the stalled clients", n, before)
	}
}

// TestOversizedBodyIs413: a body past GATEWAY_MAX_BODY_BYTES is 413 whether
// it declares its length or is chunked.
func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	m := startMesh(t, httpgateway.Config{MaxBodyBytes: 64}, fakes{})
	big := `{"title":"` + strings.Repeat("x", 100) + `"}`
	if resp, body := do(t, "POST", m.url+"/v1/conversations", big, nil); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("declared length: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("POST", m.url+"/v1/conversations", io.MultiReader(strings.NewReader(big)))
	req.ContentLength = -1 // chunked
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked: %d", resp.StatusCode)
	}
}
