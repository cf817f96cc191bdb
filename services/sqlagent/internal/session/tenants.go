package session

import (
	"context"
	"fmt"
	"time"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// tenantDBs is the configured databases as one tenant sees them: only the
// connections configured for it (or for all tenants) are listed, and every
// other name, in every call, is connections.ErrUnknown, exactly like a
// name nobody configured. The agent reaches the databases only through it
// (Agent.db), so no stage, selection or reference ("connection:<name>")
// can name another tenant's connection; the check is made at each use, so
// a session started before its connection was scoped away cannot use it
// either.
type tenantDBs struct {
	all    Databases
	tenant string
}

var _ Databases = tenantDBs{}

// db returns the databases the tenant of s may use.
func (a *Agent) db(s *Session) Databases { return tenantDBs{all: a.dbs, tenant: s.Scope.TenantID} }

func (t tenantDBs) check(name string) error {
	if !t.all.Visible(t.tenant, name) {
		return fmt.Errorf("%w: %q", connections.ErrUnknown, name)
	}
	return nil
}

func (t tenantDBs) Visible(tenant, name string) bool {
	return tenant == t.tenant && t.all.Visible(tenant, name)
}

func (t tenantDBs) List() []connections.Info {
	var out []connections.Info
	for _, c := range t.all.List() {
		if t.all.Visible(t.tenant, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

func (t tenantDBs) Dialect(name string) (string, error) {
	if err := t.check(name); err != nil {
		return "", err
	}
	return t.all.Dialect(name)
}

func (t tenantDBs) Schema(ctx context.Context, name string, req connections.SchemaRequest) (*connections.Schema, error) {
	if err := t.check(name); err != nil {
		return nil, err
	}
	return t.all.Schema(ctx, name, req)
}

func (t tenantDBs) Schemas(ctx context.Context, name string) ([]string, error) {
	if err := t.check(name); err != nil {
		return nil, err
	}
	return t.all.Schemas(ctx, name)
}

func (t tenantDBs) Tables(ctx context.Context, name, schema string) ([]string, error) {
	if err := t.check(name); err != nil {
		return nil, err
	}
	return t.all.Tables(ctx, name, schema)
}

func (t tenantDBs) Query(ctx context.Context, name, sql string, limit int, timeout time.Duration) (*connections.Result, error) {
	if err := t.check(name); err != nil {
		return nil, err
	}
	return t.all.Query(ctx, name, sql, limit, timeout)
}

func (t tenantDBs) WriteTableIn(ctx context.Context, name, sql, schema, table string, mode connections.WriteMode, timeout time.Duration) (int64, error) {
	if err := t.check(name); err != nil {
		return 0, err
	}
	return t.all.WriteTableIn(ctx, name, sql, schema, table, mode, timeout)
}

func (t tenantDBs) WriteRows(ctx context.Context, name, schema, table string, mode connections.WriteMode, columns []string, rows [][]any, timeout time.Duration) (int64, error) {
	if err := t.check(name); err != nil {
		return 0, err
	}
	return t.all.WriteRows(ctx, name, schema, table, mode, columns, rows, timeout)
}

func (t tenantDBs) CurrentSchema(ctx context.Context, name string) (string, error) {
	if err := t.check(name); err != nil {
		return "", err
	}
	return t.all.CurrentSchema(ctx, name)
}

func (t tenantDBs) Writable(name string) (bool, error) {
	if err := t.check(name); err != nil {
		return false, err
	}
	return t.all.Writable(name)
}
