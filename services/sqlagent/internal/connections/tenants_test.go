package connections_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
)

// TestScopeTenants: the tenant list scopes the connections it names; once
// set it must name every connection (those the service made itself
// excepted), and names, tenants and the "*" marker are checked.
func TestScopeTenants(t *testing.T) {
	t.Parallel()
	specs := []connections.Spec{{Name: "music", Dialect: "sqlite", DSN: "/m.db"}, {Name: "spare", Dialect: "sqlite", DSN: "/s.db"}, {Name: "sample", Dialect: "sqlite", DSN: "/x.db"}}
	cases := []struct {
		name, list string
		optional   []string
		tenants    map[string][]string // want; nil entry: all tenants
		err        string              // want an error holding this
	}{
		{name: "no list: every connection for every tenant", list: " \n", tenants: map[string][]string{"music": nil, "spare": nil, "sample": nil}},
		{name: "scoped and shared", list: "music=acme, globex;spare = acme\nsample=*", tenants: map[string][]string{"music": {"acme", "globex"}, "spare": {"acme"}, "sample": nil}},
		{name: "duplicates folded", list: "music=acme acme;spare=*;sample=*", tenants: map[string][]string{"music": {"acme"}, "spare": nil, "sample": nil}},
		{name: "the service's own sample may be left out", list: "music=acme;spare=globex", optional: []string{"sample"}, tenants: map[string][]string{"music": {"acme"}, "spare": {"globex"}, "sample": nil}},
		{name: "a connection left out", list: "music=acme", optional: []string{"sample"}, err: "connections spare are not in the tenant list"},
		{name: "the operator's own sample left out", list: "music=acme;spare=acme", err: "connections sample are not in the tenant list"},
		{name: "names match exactly", list: "Music=acme;spare=*;sample=*", err: `no connection named "Music"`},
		{name: "a name with a space inside", list: "mu sic=acme;spare=*;sample=*", err: `no connection named "mu sic"`},
		{name: "no tenant", list: "music=;spare=*;sample=*", err: "no tenant given"},
		{name: "all and some", list: "music=*,acme;spare=*;sample=*", err: "* (all tenants) with tenants named"},
		{name: "not a tenant id", list: "music=ac.me;spare=*;sample=*", err: `tenant "ac.me" is not a tenant id`},
		{name: "a wildcard inside a tenant", list: "music=acme*;spare=*;sample=*", err: `tenant "acme*" is not a tenant id`},
		{name: "named twice", list: "music=acme;music=globex;spare=*;sample=*", err: "named twice"},
		{name: "no '='", list: "music;spare=*;sample=*", err: "tenant entry 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := connections.ScopeTenants(specs, tc.list, tc.optional...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error = %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range got {
				if want := tc.tenants[s.Name]; !reflect.DeepEqual(s.Tenants, want) {
					t.Errorf("%s: tenants %q, want %q", s.Name, s.Tenants, want)
				}
			}
		})
	}
	if specs[0].Tenants != nil {
		t.Fatal("ScopeTenants changed its input")
	}
}

// TestVisible: a scoped connection is visible to its tenants only, by its
// exact name; a shared one to every tenant; an unknown one to none.
func TestVisible(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	specs, err := connections.Parse("music=sqlite:" + dir + "/m.db; spare=sqlite:" + dir + "/s.db")
	if err != nil {
		t.Fatal(err)
	}
	if specs, err = connections.ScopeTenants(specs, "music=acme; spare=*"); err != nil {
		t.Fatal(err)
	}
	r, err := connections.Open(specs, connections.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct {
		tenant, name string
		want         bool
	}{
		{"acme", "music", true}, {"globex", "music", false}, {"ACME", "music", false}, {" acme", "music", false}, {"", "music", false},
		{"acme", "MUSIC", false}, {"acme", "music ", false}, {"globex", "spare", true}, {"acme", "nosuch", false},
	} {
		if got := r.Visible(tc.tenant, tc.name); got != tc.want {
			t.Errorf("Visible(%q, %q) = %v, want %v", tc.tenant, tc.name, got, tc.want)
		}
	}
}

// TestParseRefusesNamesDifferingInCase: a name typed in a session matches
// a connection whatever its case, so two may not differ only in case.
func TestParseRefusesNamesDifferingInCase(t *testing.T) {
	t.Parallel()
	if _, err := connections.Parse("music=sqlite:/a.db; MUSIC=sqlite:/b.db"); err == nil || !strings.Contains(err.Error(), "only in case") {
		t.Fatalf("error = %v, want names differing only in case refused", err)
	}
	if _, err := connections.Parse("wh=postgres:host=a; wh[read]=postgres:host=b"); err != nil {
		t.Fatalf("a read entry of the same name: %v", err)
	}
}
