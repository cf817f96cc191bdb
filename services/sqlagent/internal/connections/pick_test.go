package connections_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/mariadbtest"
)

// TestQuestionWords: identifiers split at underscores, dots and camelCase
// humps (HTTPServer as Go's own names split), plurals fold as English
// forms them, and a table name counts in a text only as a whole word.
func TestQuestionWords(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"order_items", "order items"},
		{"orderItems", "order Items"},
		{"HTTPServerLog", "HTTP Server Log"},
		{"InvoiceLine2024", "Invoice Line2024"},
		{`shop."größe ""x"""`, "shop größe x"},
		{"SELECT * FROM t WHERE a>1", "SELECT FROM t WHERE a 1"},
		{"", ""},
	} {
		if got := strings.Join(connections.Words(tc.in), " "); got != tc.want {
			t.Errorf("Words(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"categories": "category", "boxes": "box", "invoices": "invoice", "orders": "order", "addresses": "address",
		"branches": "branch", "class": "class", "status": "status", "analysis": "analysis", "bus": "bus",
	} {
		if got := connections.Stem(in); got != want {
			t.Errorf("Stem(%q) = %q, want %q", in, got, want)
		}
	}
	for _, tc := range []struct {
		text, word string
		want       bool
	}{
		{"recorded in zz_attrition_evt, one row", "zz_attrition_evt", true},
		{"see zz_attrition_evt_old", "zz_attrition_evt", false},
		{"(orders)", "orders", true},
		{"reorders", "orders", false},
		{"größe maß", "maß", true},
		{"maße", "maß", false},
	} {
		if got := connections.ContainsWord(tc.text, tc.word); got != tc.want {
			t.Errorf("ContainsWord(%q, %q) = %v, want %v", tc.text, tc.word, got, tc.want)
		}
	}
}

// TestSchemaPickMariaDB: on MariaDB, a table is picked by its
// TABLE_COMMENT or a column's COLUMN_COMMENT, its foreign-key neighbour
// (in the same database or another) comes with it, the comments are
// shown, and a view's TABLE_COMMENT ("VIEW") is no comment.
func TestSchemaPickMariaDB(t *testing.T) {
	t.Parallel()
	setup := []string{
		`CREATE DATABASE shop`,
		`CREATE DATABASE crm`,
		`CREATE TABLE crm.parties (party_id INT PRIMARY KEY, display_name VARCHAR(80)) ENGINE=InnoDB`,
		`CREATE TABLE shop.acct_ledger (entry_id INT PRIMARY KEY, party_id INT, amt DECIMAL(10,2) COMMENT 'Invoice total in EUR',
			FOREIGN KEY (party_id) REFERENCES crm.parties (party_id)) ENGINE=InnoDB COMMENT='Customer invoices, one row per invoice'`,
		`CREATE TABLE shop.media_kinds (kind_id INT PRIMARY KEY, label VARCHAR(40) COMMENT 'file format such as MPEG audio') ENGINE=InnoDB`,
		`CREATE VIEW shop.ledger_view AS SELECT entry_id FROM shop.acct_ledger`,
	}
	for i := range 40 {
		setup = append(setup, "CREATE TABLE shop.audit_metric_"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))+" (metric_id INT, label VARCHAR(20), reading DOUBLE)")
	}
	srv := mariadbtest.Start(t, strings.Join(setup, ";\n")+";")
	reg, err := connections.Open([]connections.Spec{{Name: "shop", Dialect: connections.MySQL, DSN: srv.DSN("am", "shop")}}, connections.Options{MaxSchemaChars: 600})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	ctx := context.Background()

	s, err := reg.Schema(ctx, "shop", connections.SchemaRequest{Question: "What is the invoice total per customer?"})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(s.Shown)); !slices.Equal(got, []string{"acct_ledger", "crm.parties"}) || !s.Selected || !s.ByQuestion || s.Total != 44 {
		t.Fatalf("shown %q (selected %v, by question %v, of %d), want acct_ledger and crm.parties of 44:\n%s", s.Shown, s.Selected, s.ByQuestion, s.Total, s.Text)
	}
	if want := "acct_ledger(entry_id int(11), party_id int(11), amt decimal(10,2) /* Invoice total in EUR */) -- Customer invoices, one row per invoice\n"; !strings.Contains(s.Text, want) {
		t.Fatalf("schema lacks %q:\n%s", want, s.Text)
	}

	s, err = reg.Schema(ctx, "shop", connections.SchemaRequest{Question: "Which file formats exist?"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Shown, []string{"media_kinds"}) || !strings.Contains(s.Note(), "(1 of 44 tables, picked by the question)") {
		t.Fatalf("shown %q, note %q; want media_kinds by its column comment", s.Shown, s.Note())
	}

	s, err = reg.Schema(ctx, "shop", connections.SchemaRequest{Question: "ledger view"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Text, "ledger_view(entry_id int(11))\n") {
		t.Fatalf("the view's line carries a comment:\n%s", s.Text)
	}
}
