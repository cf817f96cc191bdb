package session_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// A connection is checked against the session's tenant at every use, not
// only when it is picked: a session started while its connection served
// every tenant cannot run SQL on it once the configuration scopes it to
// another tenant (a restart with SQLAGENT_CONNECTION_TENANTS), and nothing
// reaches the database.
func TestConnectionScopedAwayIsNotUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shop.db")
	spec, err := connections.CreateSample(path)
	if err != nil {
		t.Fatal(err)
	}
	open := func(tenants string) session.Databases {
		specs, err := connections.ScopeTenants([]connections.Spec{spec}, tenants)
		if err != nil {
			t.Fatal(err)
		}
		r, err := connections.Open(specs, connections.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	store := newStore(t, testkit.MongoDB(t))
	before := session.NewAgent(store, open(""), nil, newClock().opts())
	id := toConfirmSQL(t, before) // scope's tenant is acme
	send(t, before, id, "yes", session.StageExecuteSQL)

	var queries atomic.Int64
	after := session.NewAgent(store, countedDBs{Databases: open("sample=globex"), queries: &queries}, nil, newClock().opts())
	_, _, err = after.Send(ctx, scope, id, "nightly", "")
	if err == nil || !errors.Is(err, connections.ErrUnknown) {
		t.Fatalf("running on a connection scoped to another tenant: %v, want it unknown", err)
	}
	if n := queries.Load(); n != 0 {
		t.Fatalf("%d queries reached the database", n)
	}
	if _, _, err := after.Create(ctx, scope, connections.SampleName); !errors.Is(err, session.ErrUnknownConnection) {
		t.Fatalf("a new session on it: %v, want ErrUnknownConnection", err)
	}
	other := session.Scope{TenantID: "globex", ProjectID: "shop"}
	if _, _, err := after.Create(ctx, other, connections.SampleName); err != nil {
		t.Fatalf("globex on its own connection: %v", err)
	}
}
