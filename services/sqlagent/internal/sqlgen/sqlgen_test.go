package sqlgen_test

import (
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/sqlgen"
)

func TestExtract(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, in, want string }{
		{"plain", "SELECT 1;", "SELECT 1"},
		{"fenced", "Here you go:\n```sql\nSELECT Name\nFROM Artist;\n```\nEnjoy.", "SELECT Name\nFROM Artist"},
		{"fence without language", "```\nSELECT 2\n```", "SELECT 2"},
		{"think section", "<think>maybe DELETE?</think>\n```sql\nSELECT 3\n```", "SELECT 3"},
		{"cannot", "CANNOT: no salary column", "CANNOT: no salary column"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := sqlgen.Extract(tc.in); got != tc.want {
				t.Fatalf("Extract(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
