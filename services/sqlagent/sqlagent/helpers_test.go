package sqlagent_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	sqlagentv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/sqlagent/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/sqlagent/sqlagent"

	_ "modernc.org/sqlite" // the test's own handle on the Chinook copy
)

// chinookCopy copies the shared Chinook SQLite database into t.TempDir()
// and returns the copy's path; the shared file is never opened for writing.
// It skips the test when ../shared/data is absent.
func chinookCopy(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		src := filepath.Join(dir, "shared", "data", "chinook", "Chinook_Sqlite.sqlite")
		if _, err := os.Stat(src); err == nil {
			data, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "chinook.sqlite")
			if err := os.WriteFile(dst, data, 0o600); err != nil {
				t.Fatal(err)
			}
			return dst
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("shared/data/chinook not found above the package directory (the data lives in ../shared/data next to the repository)")
		}
		dir = parent
	}
}

// openSQLite opens the test's own handle on a database file.
func openSQLite(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// startModel starts the provider simulator and the real model gateway in
// front of it, serving the logical model "sql".
func startModel(t *testing.T) (*providersim.Server, string) {
	t.Helper()
	sim := providersim.Start(t, providersim.Options{Flavor: providersim.DeepSeek})
	routing := fmt.Sprintf("providers:\n  up: {type: deepseek, base_url: %q}\nmodels:\n  sql:\n    - {provider: up, model: sim-sql}\n", sim.URL)
	addr := modelgatewaytest.Start(t, routing, map[string]string{
		"MODELGATEWAY_MAX_ATTEMPTS":   "1",
		"MODELGATEWAY_PROBE_INTERVAL": "1h",
		"DEEPSEEK_API_KEY":            "test-key",
	})
	return sim, addr
}

// startAgent starts the SQL agent with the given connections against the
// model gateway at modelAddr and a fresh Mongo database, and returns a client.
func startAgent(t *testing.T, modelAddr, conns string, extra map[string]string) sqlagentv1.SqlAgentServiceClient {
	t.Helper()
	c, _ := startAgentLogged(t, modelAddr, conns, extra, nil)
	return c
}

// startAgentLogged is startAgent with the service's JSON log written to
// logs (nil: discarded); it also returns the running service, to stop it.
func startAgentLogged(t *testing.T, modelAddr, conns string, extra map[string]string, logs *testkit.Buffer) (sqlagentv1.SqlAgentServiceClient, *testkit.Running) {
	t.Helper()
	uri, dbName := testkit.MongoURI(t)
	vars := map[string]string{
		"MONGO_URI":            uri,
		"MONGO_DATABASE":       dbName,
		"MODELGATEWAY_ADDR":    modelAddr,
		"SQLAGENT_CONNECTIONS": conns,
	}
	for k, v := range extra {
		vars[k] = v
	}
	var cfg sqlagent.Config
	if err := config.Load("", &cfg, config.Map(vars)); err != nil {
		t.Fatal(err)
	}
	running := testkit.StartService(t, "sqlagent", func(ctx context.Context, rt service.Runtime) error {
		if logs != nil {
			rt.Logger = slog.New(slog.NewJSONHandler(logs, nil))
		}
		return sqlagent.Run(ctx, &cfg, rt)
	})
	conn, err := grpc.NewClient(running.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return sqlagentv1.NewSqlAgentServiceClient(conn), running
}

func ctxTimeout(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var scopeA = &commonv1.Scope{TenantId: "acme", ProjectId: "music"}

// send sends text (or, with a "sel:" prefix, a selection) and fails the test on error.
func send(t *testing.T, c sqlagentv1.SqlAgentServiceClient, id, text string) *sqlagentv1.SendInputResponse {
	t.Helper()
	return sendScoped(t, c, scopeA, id, text)
}

// sendScoped is send in scope.
func sendScoped(t *testing.T, c sqlagentv1.SqlAgentServiceClient, scope *commonv1.Scope, id, text string) *sqlagentv1.SendInputResponse {
	t.Helper()
	req := &sqlagentv1.SendInputRequest{Scope: scope, SessionId: id, Text: text}
	if sel, ok := cutPrefix(text, "sel:"); ok {
		req.Text, req.Selection = "", sel
	}
	resp, err := c.SendInput(ctxTimeout(t), req)
	if err != nil {
		t.Fatalf("SendInput(%q): %v", text, err)
	}
	return resp
}

func cutPrefix(s, p string) (string, bool) {
	if len(s) >= len(p) && s[:len(p)] == p {
		return s[len(p):], true
	}
	return s, false
}

// wantStage fails unless resp's session is in stage.
func wantStage(t *testing.T, resp interface{ GetSession() *sqlagentv1.Session }, stage string) {
	t.Helper()
	if got := resp.GetSession().GetStage(); got != stage {
		t.Fatalf("stage = %s, want %s", got, stage)
	}
}

// wantInvalid fails unless err is InvalidArgument naming field.
func wantInvalid(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.InvalidArgument {
		t.Fatalf("error = %v, want InvalidArgument", err)
	}
	if msg := st.Message(); len(msg) < len(field) || msg[:len(field)] != field {
		t.Fatalf("error %q does not name field %q", msg, field)
	}
}

// wantNotFound fails unless err is NotFound naming field.
func wantNotFound(t *testing.T, err error, field string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.NotFound || !strings.HasPrefix(st.Message(), field+": ") {
		t.Fatalf("error = %v, want NotFound naming %q", err, field)
	}
}

func optionValues(opts []*sqlagentv1.Option) []string {
	var out []string
	for _, o := range opts {
		out = append(out, o.GetValue())
	}
	return out
}

// runRead confirms the pending read SQL of session id with confirm, which
// asks for the job name (EXECUTE_SQL), and takes the default name: the
// SQL runs.
func runRead(t *testing.T, c sqlagentv1.SqlAgentServiceClient, id, confirm string) *sqlagentv1.SendInputResponse {
	t.Helper()
	r := send(t, c, id, confirm)
	wantStage(t, r, "EXECUTE_SQL")
	return send(t, c, id, "sel:default")
}
