package connections

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/agentmesh/agentmesh/libs/grpcx"
)

// Connections scoped to tenants (SQLAGENT_CONNECTION_TENANTS). Without a
// tenant list every connection serves every tenant, as before the list
// existed, so a single-tenant install needs nothing new. Once the list is
// set, every connection of SQLAGENT_CONNECTIONS must be in it, either for
// the tenants named or for all ("*"): a multi-tenant install never shares
// a database because an entry was forgotten, and the start fails naming
// the connection instead. A connection another tenant cannot use is, to
// that tenant, one that does not exist: not listed, not offered, and
// refused by name the same way an unknown name is (Registry.Visible).

// AllTenants marks a connection every tenant may use.
const AllTenants = "*"

// ScopeTenants applies a tenant list to specs: entries separated by ';'
// or newlines, each "connection=tenant,tenant..." (tenants separated by
// ',' or spaces, matched exactly, as scope ids are everywhere) or
// "connection=*". An empty list leaves every connection to all tenants.
// With a list, every spec must be named in it, except those in optional,
// which are left to all tenants unless named. Errors name the entry and
// the connection, never a DSN.
func ScopeTenants(specs []Spec, list string, optional ...string) ([]Spec, error) {
	if strings.TrimSpace(list) == "" {
		return specs, nil
	}
	index := map[string]int{}
	for i, s := range specs {
		index[s.Name] = i
	}
	out := slices.Clone(specs)
	named := map[string]bool{}
	entries := strings.FieldsFunc(list, func(r rune) bool { return r == ';' || r == '\n' })
	for i, e := range entries {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, rest, ok := strings.Cut(e, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("tenant entry %d: want connection=tenant,tenant... or connection=*", i+1)
		}
		j, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("tenant entry %d: no connection named %q (names match exactly)", i+1, name)
		}
		if named[name] {
			return nil, fmt.Errorf("connection %q: named twice in the tenant list", name)
		}
		named[name] = true
		tenants := strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' })
		switch {
		case len(tenants) == 0:
			return nil, fmt.Errorf("connection %q: no tenant given (use * for all)", name)
		case slices.Contains(tenants, AllTenants) && len(tenants) > 1:
			return nil, fmt.Errorf("connection %q: * (all tenants) with tenants named", name)
		case tenants[0] == AllTenants:
			out[j].Tenants = nil
			continue
		}
		for _, t := range tenants {
			if err := grpcx.ValidScopeID(t); err != nil || strings.ContainsAny(t, ",;=") {
				return nil, fmt.Errorf("connection %q: tenant %q is not a tenant id (printable ASCII without '.', '*', '>', ',', ';', '=' or whitespace)", name, t)
			}
		}
		sort.Strings(tenants)
		out[j].Tenants = slices.Compact(tenants)
	}
	var missing []string
	for _, s := range specs {
		if !named[s.Name] && !slices.Contains(optional, s.Name) {
			missing = append(missing, s.Name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("connections %s are not in the tenant list: with a tenant list, give every connection its tenants, or * to share it with all", strings.Join(missing, ", "))
	}
	return out, nil
}

// Visible reports whether tenant may use the named connection: it exists
// and is configured for all tenants or for this one. Every request path
// checks it before it names a connection to the registry (package
// session's tenant view, the API's list).
func (r *Registry) Visible(tenant, name string) bool {
	c, ok := r.conns[name]
	return ok && (c.spec.Tenants == nil || slices.Contains(c.spec.Tenants, tenant))
}
