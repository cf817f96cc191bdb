package session_test

import (
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/session"
)

// TestMaskSecrets masks credentials in the forms their own documentation
// gives them (libpq connection URIs and key/value strings, the Go MySQL
// driver's DSN, HTTP bearer tokens, JSON keys) and leaves alone words that
// only look like them.
func TestMaskSecrets(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"postgresql://user:secret@localhost:5432/mydb", "postgresql://user:***@localhost:5432/mydb"},
		{"use postgres://am:p%40ss@db.example:5432/x?sslmode=require please", "use postgres://am:***@db.example:5432/x?sslmode=require please"},
		{"host=localhost port=5432 dbname=mydb password=secret connect_timeout=10", "host=localhost port=5432 dbname=mydb password=*** connect_timeout=10"},
		{"dbname=mydb password='my secret' user=am", "dbname=mydb password=*** user=am"},
		{"user:password@tcp(localhost:5555)/dbname?tls=skip-verify", "user:***@tcp(localhost:5555)/dbname?tls=skip-verify"},
		{"reader:pw@unix(/tmp/mysql.sock)/shop", "reader:***@unix(/tmp/mysql.sock)/shop"},
		{"Authorization: Bearer sk-abc.DEF_123", "Authorization: Bearer ***"},
		{`{"apiKey": "xyz-1", "model": "sql"}`, `{"apiKey": ***, "model": "sql"}`},
		{"token: ghp_abc; then", "token: ***; then"},
		{"PWD=hunter2", "PWD=***"},
		// Not secrets.
		{"SELECT count(*) FROM users WHERE password_reset = 1", "SELECT count(*) FROM users WHERE password_reset = 1"},
		{"mail ana@example.com the totals", "mail ana@example.com the totals"},
		{"SELECT a FROM t WHERE ts > '2024-01-01 10:00:00'", "SELECT a FROM t WHERE ts > '2024-01-01 10:00:00'"},
		{"https://example.com/path@v2", "https://example.com/path@v2"},
	}
	for _, tc := range cases {
		if got := session.MaskSecrets(tc.in); got != tc.want {
			t.Errorf("MaskSecrets(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
