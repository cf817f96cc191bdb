package marketdata

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// server is a local market-data endpoint answering per ticker.
func server(t *testing.T) (*httptest.Server, chan *http.Request) {
	t.Helper()
	seen := make(chan *http.Request, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Clone(context.Background())
		switch r.URL.Query().Get("ticker") {
		case "BHP":
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"ticker":"BHP","price":45.1,"currency":"AUD","as_of":"2025-03-14T06:00:00Z"}`))
		case "NONE":
			http.NotFound(w, r)
		case "DOWN":
			http.Error(w, "upstream exchange feed down", http.StatusServiceUnavailable)
		case "HTML":
			_, _ = w.Write([]byte("<html>oops</html>"))
		case "SLOW":
			<-r.Context().Done()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

func registry(t *testing.T, url, key string) *tools.Registry {
	t.Helper()
	c, err := New(url, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	if err := c.Register(reg); err != nil {
		t.Fatal(err)
	}
	if err := reg.Check(); err != nil {
		t.Fatal(err)
	}
	return reg
}

func run(t *testing.T, reg *tools.Registry, tool, args string, timeout time.Duration) (tools.Result, error) {
	t.Helper()
	canon, err := reg.Validate(tool, []byte(args))
	if err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ex, _ := reg.Executor(tool)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return ex.Execute(ctx, tools.Call{Tool: tool, Args: canon})
}

func TestStockPrice(t *testing.T) {
	t.Parallel()
	srv, seen := server(t)
	reg := registry(t, srv.URL+"/", "secret-key")
	// A lower-case ticker is sent upper-case.
	res, err := run(t, reg, ToolStockPrice, `{"ticker":"bhp","period":"5d"}`, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r := <-seen
	if r.URL.Path != "/v1/quote" || r.URL.Query().Get("period") != "5d" || r.Header.Get("Authorization") != "Bearer secret-key" {
		t.Errorf("request %s %v auth %q", r.URL.Path, r.URL.Query(), r.Header.Get("Authorization"))
	}
	var got map[string]any
	if err := json.Unmarshal(res.Data, &got); err != nil || got["price"] != 45.1 {
		t.Errorf("data %s", res.Data)
	}
}

func TestFinancialsOutcomes(t *testing.T) {
	t.Parallel()
	srv, seen := server(t)
	reg := registry(t, srv.URL, "")
	tests := []struct {
		ticker  string
		empty   bool
		wantErr string
	}{
		{"BHP", false, ""},
		{"NONE", true, ""},
		{"DOWN", false, "HTTP 503: upstream exchange feed down"},
		{"HTML", false, "not a JSON object"},
		{"SLOW", false, "deadline exceeded"},
	}
	for _, tc := range tests {
		t.Run(tc.ticker, func(t *testing.T) {
			res, err := run(t, reg, ToolFinancials, `{"ticker":"`+tc.ticker+`","report_type":"annual"}`, 300*time.Millisecond)
			r := <-seen
			if r.URL.Path != "/v1/financials" || r.URL.Query().Get("report_type") != "annual" || r.Header.Get("Authorization") != "" {
				t.Errorf("request %s %v", r.URL.Path, r.URL.Query())
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				if tc.ticker == "SLOW" && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("timeout error %v does not wrap DeadlineExceeded", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tools.IsEmpty(res.Data) != tc.empty {
				t.Errorf("data %s, want empty=%v", res.Data, tc.empty)
			}
		})
	}
}

func TestArgumentsSchema(t *testing.T) {
	t.Parallel()
	reg := registry(t, "http://127.0.0.1:1", "")
	for _, bad := range []string{`{}`, `{"ticker":"BHP; DROP"}`, `{"ticker":"BHP","period":"10y"}`, `{"ticker":"BHP","extra":1}`} {
		if _, err := reg.Validate(ToolStockPrice, []byte(bad)); !errors.Is(err, tools.ErrInvalidArguments) {
			t.Errorf("Validate(%s) = %v", bad, err)
		}
	}
	if _, err := New("ftp://x", "", nil); err == nil {
		t.Error("ftp URL accepted")
	}
}
