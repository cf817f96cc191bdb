package hybrid

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/services/indexer/internal/bm25"
	"github.com/agentmesh/agentmesh/services/indexer/internal/embed"
	"github.com/agentmesh/agentmesh/services/indexer/internal/vector"
)

func TestFuseRewardsAgreement(t *testing.T) {
	t.Parallel()
	kw := []bm25.Hit{{Key: "a", Score: 9}, {Key: "b", Score: 5}, {Key: "c", Score: 1}, {Key: "e", Score: 0.5}}
	vec := []vector.Hit{{Key: "d", Score: 0.9}, {Key: "b", Score: 0.8}, {Key: "f", Score: 0.7}, {Key: "c", Score: 0.6}}
	got := Fuse(kw, vec, 4, 1)
	keys := []string{got[0].Key, got[1].Key, got[2].Key, got[3].Key}
	// b is 2nd in both lists and c 3rd and 4th: agreement beats a and d,
	// each 1st in one list only (tied, so ordered by key).
	if !slices.Equal(keys, []string{"b", "c", "a", "d"}) {
		t.Fatalf("fused order = %v, want [b c a d]", keys)
	}
	if got[0].KeywordScore != 5 || got[0].VectorScore < 0.79 || got[0].Score != 2.0/62 {
		t.Fatalf("b = %+v", got[0])
	}
	if got[2].VectorScore != 0 {
		t.Fatalf("a was not a vector hit but has vector score %v", got[2].VectorScore)
	}
}

func chunks(texts map[string]string, doc string) []Chunk {
	e := embed.LocalHash{}
	var out []Chunk
	for k, txt := range texts {
		out = append(out, Chunk{Key: k, Doc: doc, Title: doc, Text: txt, SourceType: 1, ContentType: "email", Vector: e.Vector(txt)})
	}
	slices.SortFunc(out, func(a, b Chunk) int { return cmp(a.Key, b.Key) })
	return out
}

func cmp(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func search(t *testing.T, m *Manager, s Scope, q string, mode Mode) []string {
	t.Helper()
	var keys []string
	err := m.Read(s, func(sh *Shard) error {
		hits, err := sh.Search(context.Background(), q, embed.LocalHash{}.Vector(q), 10, mode, nil)
		for _, h := range hits {
			keys = append(keys, h.Key)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestManagerIsolatesScopesAndRebuilds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := ManagerOptions{Dir: dir, Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions}
	m, err := NewManager(opts)
	if err != nil {
		t.Fatal(err)
	}
	acme, other := Scope{Tenant: "acme"}, Scope{Tenant: "acme", Project: "../x"}
	a := chunks(map[string]string{"a1": "ledger timeout in the payment service", "a2": "quarterly dividend raised"}, "da")
	o := chunks(map[string]string{"o1": "ledger timeout seen by another project"}, "do")
	if err := m.Write(acme, func(tx Tx) error { return tx.Add(a) }); err != nil {
		t.Fatal(err)
	}
	if err := m.Write(other, func(tx Tx) error { return tx.Add(o) }); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{ModeHybrid, ModeKeyword, ModeVector} {
		got := search(t, m, acme, "ledger timeout", mode)
		if len(got) == 0 || got[0] != "a1" || slices.Contains(got, "o1") {
			t.Fatalf("mode %d: acme sees %v", mode, got)
		}
	}
	// Reading a scope nobody wrote creates nothing.
	if got := search(t, m, Scope{Tenant: "nobody"}, "ledger", ModeHybrid); len(got) != 0 {
		t.Fatalf("unknown scope: %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "nobody")); !os.IsNotExist(err) {
		t.Fatalf("a read created a shard directory: %v", err)
	}
	// The odd project id stays inside the data directory.
	if _, err := os.Stat(filepath.Join(dir, "acme", "p-%2E%2E%2Fx")); err != nil {
		t.Fatalf("escaped project directory: %v", err)
	}
	before := search(t, m, acme, "ledger dividend", ModeHybrid)

	// Rebuild from a "store" holding only a2: a1 disappears.
	err = m.Rebuild(acme, func(add func([]Chunk) error) error { return add(a[1:]) })
	if err != nil {
		t.Fatal(err)
	}
	if got := search(t, m, acme, "ledger dividend", ModeHybrid); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("after rebuild: %v (before %v)", got, before)
	}
	// Writes after a rebuild reach the new shard.
	if err := m.Write(acme, func(tx Tx) error { return tx.Add(a[:1]) }); err != nil {
		t.Fatal(err)
	}
	if got := search(t, m, acme, "ledger dividend", ModeHybrid); !slices.Equal(got, before) {
		t.Fatalf("after re-adding: %v, want %v", got, before)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	// Reopened with the same embedder: data is there.
	m2, _ := NewManager(opts)
	if got := search(t, m2, acme, "ledger dividend", ModeHybrid); !slices.Equal(got, before) {
		t.Fatalf("after reopen: %v, want %v", got, before)
	}
	if m2.Stale(acme) {
		t.Fatal("a shard built with the same embedder is stale")
	}
	m2.Close()

	// Reopened with another embedder: the shard is wiped and marked stale.
	opts.Embedder = "modelgateway/embed/384"
	m3, _ := NewManager(opts)
	defer m3.Close()
	if got := search(t, m3, acme, "ledger", ModeKeyword); len(got) != 0 {
		t.Fatalf("a shard of another embedder was reused: %v", got)
	}
	if !m3.Stale(acme) {
		t.Fatal("a shard of another embedder is not reported stale")
	}
}

// TestReplaceDocumentAndTokens: ReplaceDocument leaves exactly the given
// chunks of a document in both indexes, and says how many others it
// removed (none, writing nothing, for a document neither holds); tokens
// are per document, and a rebuilt shard has none.
func TestReplaceDocumentAndTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := NewManager(ManagerOptions{Dir: t.TempDir(), Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	sc := Scope{Tenant: "acme"}
	v1 := chunks(map[string]string{"d_v1_0": "ledger runbook", "d_v1_1": "restart the ledger workers", "d_v1_2": "page the on-call"}, "d")
	v2 := chunks(map[string]string{"d_v1_0": "ledger runbook, revised", "d_v2_1": "drain the payments queue"}, "d")
	holds := func() (kw, vec []string) {
		t.Helper()
		if err := m.Read(sc, func(sh *Shard) error {
			var err error
			kw, vec, err = sh.DocKeys(ctx, "d")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		slices.Sort(kw)
		slices.Sort(vec)
		return kw, vec
	}
	for _, tc := range []struct {
		name        string
		chunks      []Chunk
		wantRemoved int
		want        []string
	}{
		{"absent, nothing to remove", nil, 0, nil},
		{"first content", v1, 0, []string{"d_v1_0", "d_v1_1", "d_v1_2"}},
		{"same content again", v1, 0, []string{"d_v1_0", "d_v1_1", "d_v1_2"}},
		{"new content", v2, 2, []string{"d_v1_0", "d_v2_1"}},
		{"removed", nil, 2, nil},
	} {
		var removed int
		err := m.Write(sc, func(tx Tx) error {
			var err error
			removed, err = tx.ReplaceDocument(ctx, "d", tc.chunks)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		kw, vec := holds()
		if removed != tc.wantRemoved || !slices.Equal(kw, tc.want) || !slices.Equal(vec, tc.want) {
			t.Errorf("%s: removed %d, holds %v / %v; want %d, %v", tc.name, removed, kw, vec, tc.wantRemoved, tc.want)
		}
	}
	if got := search(t, m, sc, "ledger runbook", ModeKeyword); len(got) != 0 {
		t.Errorf("a removed document is found: %v", got)
	}

	token := func(doc string) (string, bool) {
		var tok string
		var ok bool
		_ = m.Write(sc, func(tx Tx) error { tok, ok = tx.Applied(doc); return nil })
		return tok, ok
	}
	_ = m.Write(sc, func(tx Tx) error {
		tx.SetApplied("d", "h/3/")
		tx.SetApplied("e", "h/1/j")
		tx.ForgetApplied("e")
		return nil
	})
	if tok, ok := token("d"); !ok || tok != "h/3/" {
		t.Errorf("token of d: %q, %v", tok, ok)
	}
	if _, ok := token("e"); ok {
		t.Error("a forgotten token is still there")
	}
	if err := m.Rebuild(sc, func(add func([]Chunk) error) error { return add(v1) }); err != nil {
		t.Fatal(err)
	}
	if _, ok := token("d"); ok {
		t.Error("a rebuilt shard kept a token")
	}
}

// A write that is under way when the manager closes finishes, and Close
// then returns: a Tx's methods take no read lock of their own, which a
// sync.RWMutex would hold back behind the close waiting for the write
// (the indexer hung at shutdown so, and a test's cleanup with it).
func TestCloseDuringAWriteDoesNotDeadlock(t *testing.T) {
	t.Parallel()
	m, err := NewManager(ManagerOptions{Dir: t.TempDir(), Embedder: embed.LocalHashName, Dimensions: embed.LocalHashDimensions})
	if err != nil {
		t.Fatal(err)
	}
	s := Scope{Tenant: "acme"}
	first := chunks(map[string]string{"k1": "ledger timeout"}, "d1")
	if err := m.Write(s, func(tx Tx) error { return tx.Add(first) }); err != nil {
		t.Fatal(err)
	}
	inside, proceed := make(chan struct{}), make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		wrote <- m.Write(s, func(tx Tx) error {
			close(inside)
			<-proceed
			if _, err := tx.ReplaceDocument(context.Background(), "d1", chunks(map[string]string{"k2": "dividend raised"}, "d1")); err != nil {
				return err
			}
			return tx.DeleteDocument(context.Background(), "d0")
		})
	}()
	<-inside
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	time.Sleep(200 * time.Millisecond) // Close now waits for the write
	close(proceed)
	for name, ch := range map[string]chan error{"the write": wrote, "Close": closed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not return: the write and the close deadlocked", name)
		}
	}
}
