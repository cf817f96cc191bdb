package grpcapi_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/indexer/internal/document"
	"github.com/agentmesh/agentmesh/services/indexer/internal/follow"
	"github.com/agentmesh/agentmesh/services/indexer/internal/hybrid"
	"github.com/agentmesh/agentmesh/services/indexer/internal/intake"
)

// marker is a word found in version v of test document i only.
func marker(i int, v string) string { return fmt.Sprintf("zq%02dx%s", i, v) }

// runbook is version v of test document i: three paragraphs, so several
// chunks (the harness cuts at 400 characters), one with its marker.
func runbook(i int, v string) string {
	p := "When the ledger times out for card payments, check the payments gateway latency, restart the ledger workers one at a time, and page the on-call engineer if the error rate stays above two percent for ten minutes."
	return fmt.Sprintf("%s\n\n%s Escalations for this service carry the marker %s.\n\n%s", p, strings.Repeat("Keep the incident channel updated. ", 8), marker(i, v), p)
}

// find returns the ids of the documents whose chunks a keyword search for
// word returns, each once per chunk.
func (h *harness) find(t *testing.T, sc *commonv1.Scope, word string) []string {
	t.Helper()
	var docs []string
	for _, hit := range h.hits(t, sc, word, indexerv1.SearchMode_SEARCH_MODE_KEYWORD, 20) {
		docs = append(docs, hit.GetDocumentId())
	}
	return docs
}

// waitFound polls h's search every 2 ms until word finds document id.
func (h *harness) waitFound(t *testing.T, sc *commonv1.Scope, word, id string) {
	t.Helper()
	// Polled at a finer grain than testkit.Eventually's, to measure the lag.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(h.find(t, sc, word), id) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %q does not find %s", h.instanceName, word, id)
		}
		<-tick.C
	}
}

// holds returns the chunk ids of document id in h's shard, in each index.
func (h *harness) holds(t *testing.T, sc document.Scope, id string) (keyword, vectors []string) {
	t.Helper()
	err := h.indexes.Read(hybrid.Scope{Tenant: sc.Tenant, Project: sc.Project}, func(sh *hybrid.Shard) error {
		var err error
		keyword, vectors, err = sh.DocKeys(context.Background(), id)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keyword)
	slices.Sort(vectors)
	return keyword, vectors
}

// applied returns the token h's shard recorded for document id.
func (h *harness) applied(t *testing.T, sc document.Scope, id string) (token string, ok bool) {
	t.Helper()
	err := h.indexes.Write(hybrid.Scope{Tenant: sc.Tenant, Project: sc.Project}, func(tx hybrid.Tx) error {
		token, ok = tx.Applied(id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return token, ok
}

// agrees waits until h's shard holds, of each document, exactly the chunk
// set its record says (nothing if it is gone), in both indexes, without
// another chunk; with tokens, also the record's base chunk (the token
// names the extraction whose digest it carries).
func (h *harness) agrees(t *testing.T, sc document.Scope, ids []string, tokens bool) {
	t.Helper()
	var last string
	check := func() bool {
		for _, id := range ids {
			st, err := h.store.IndexState(context.Background(), sc, id)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			if st.Present() {
				want = document.ChunkIDs(id, st.Chunks)
				slices.Sort(want)
			}
			kw, vec := h.holds(t, sc, id)
			tok, known := h.applied(t, sc, id)
			switch {
			case !slices.Equal(kw, want) || !slices.Equal(vec, want):
				last = fmt.Sprintf("%s holds %v / %v, the record says %v", id, kw, vec, want)
				return false
			case st.Present() && tokens && tok != st.Token():
				last = fmt.Sprintf("%s: token %q (known %v), the record's %q", id, tok, known, st.Token())
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, 10*time.Second, check, "%s agrees with the store; last seen: %v", h.instanceName, stringer(func() string { return last }))
}

// stringer formats as what its function returns when formatted.
type stringer func() string

func (s stringer) String() string { return s() }

// TestReplicasFollowEachOther: two indexers on one database and one NATS,
// each with its own search indexes, as two replicas behind one Service.
// B finds what A ingests within a lag (measured); A's new content
// replaces B's chunks; A's delete empties them; the extraction's base
// chunk reaches B. A applies its own changes once. A change applied again,
// or an earlier one arriving late, leaves B as it was. B stopped while A
// changes things catches up from its position when it restarts; B
// restarted after the stream lost its position rebuilds. Its health says
// NOT_SERVING (an error) until it has caught up.
func TestReplicasFollowEachOther(t *testing.T) {
	t.Parallel()
	in := newInfra(t)
	dirB := t.TempDir()
	a := startWith(t, in, startOptions{instance: "a", ownDir: true})
	// B runs no extraction: every change is A's.
	b := startWith(t, in, startOptions{instance: "b", dir: dirB, noExtraction: true})
	a.caughtUp(t)
	b.caughtUp(t)
	sc, ds := scope("acme", "ops"), document.Scope{Tenant: "acme", Project: "ops"}
	url := func(i int) string { return fmt.Sprintf("https://wiki.example.com/ops/%d", i) }

	// Ingests on A, found on B.
	const n = 10
	var ids []string
	var fromCall, fromReturn []time.Duration
	for i := range n {
		began := time.Now()
		id := a.ingest(t, sc, wiki, url(i), fmt.Sprintf("Runbook %d", i), runbook(i, "v1")).GetDocument().GetId()
		returned := time.Now()
		b.waitFound(t, sc, marker(i, "v1"), id)
		fromCall, fromReturn = append(fromCall, time.Since(began)), append(fromReturn, time.Since(returned))
		ids = append(ids, id)
	}
	for _, id := range ids {
		a.settled(t, sc, id)
	}
	slices.Sort(fromCall)
	slices.Sort(fromReturn)
	t.Logf("lag, ingest on A to found on B, %d documents: after A's reply p50 %v max %v; from A's call p50 %v max %v",
		n, fromReturn[n/2].Round(time.Millisecond), fromReturn[n-1].Round(time.Millisecond),
		fromCall[n/2].Round(time.Millisecond), fromCall[n-1].Round(time.Millisecond))
	if fromReturn[n-1] > 5*time.Second {
		t.Errorf("lag up to %v", fromReturn[n-1])
	}
	// Every record's state, base chunk included, on both.
	a.agrees(t, ds, ids, true)
	b.agrees(t, ds, ids, true)
	// A wrote each change once, from the chunks at hand; its follower found
	// its own changes applied. B read what it wrote. (Each document had two
	// changes: indexed, then extracted.)
	for _, h := range []*harness{a, b} {
		testkit.Eventually(t, 10*time.Second, func() bool { _, n := h.applies.mean(); return n == 2*len(ids) }, "%s's follower applies every change", h.instanceName)
	}
	sa, sb := a.svc.ConvergeStats(), b.svc.ConvergeStats()
	ownMean, own := a.applies.mean()
	otherMean, other := b.applies.mean()
	t.Logf("A: %+v; its follower's %d applies of its own changes took %v on average", sa, own, ownMean)
	t.Logf("B: %+v; its follower's %d applies of A's changes took %v on average", sb, other, otherMean)
	if sa.ChunksRead != 0 || sa.Written != n || sa.Unchanged != int64(n+own) {
		t.Errorf("A converged %+v after %d follower applies: want %d writes, no chunk read, each extraction and follower apply finding its change written", sa, own, n)
	}
	// Each of B's applies wrote, or found the change already written by
	// an earlier apply that read the record after it (an extraction that
	// ended before B applied the ingest).
	if sb.Written < n || sb.ChunksRead == 0 || sb.Written+sb.Unchanged != int64(other) {
		t.Errorf("B converged %+v in %d applies: want each document written, each apply written or already held", sb, other)
	}

	// New content on A replaces B's chunks: the old marker is gone, the
	// new one found once per chunk that has it, no chunk of the old set
	// left.
	a.ingest(t, sc, wiki, url(0), "Runbook 0", runbook(0, "v2")+"\n\nA new paragraph for version two.")
	b.waitFound(t, sc, marker(0, "v2"), ids[0])
	b.agrees(t, ds, ids[:1], false)
	if got := b.find(t, sc, marker(0, "v1")); len(got) != 0 {
		t.Errorf("B still finds the old content: %v", got)
	}
	if got := b.find(t, sc, marker(0, "v2")); len(got) != 1 {
		t.Errorf("B finds the new marker in %d chunks, want 1: %v", len(got), got)
	}
	// A delete on A: B stops finding the document.
	if _, err := a.docs.DeleteDocument(context.Background(), &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: ids[1]}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() bool { return len(b.find(t, sc, marker(1, "v1"))) == 0 }, "B stops finding the deleted document")
	b.agrees(t, ds, ids[:2], false)

	// Changes delivered again, and the first content's change arriving
	// after the second's, leave B as it is: it reads the record.
	a.settled(t, sc, ids[0])
	b.agrees(t, ds, ids, true)
	before := b.svc.ConvergeStats()
	replay := &timings{}
	for i, id := range ids {
		hash := document.Hash(runbook(i, "v1")) // the first content of each
		ev, err := events.NewEvent(intake.EventChunksChanged, intake.Source, sc, id, &indexerv1.Document{Id: id, Scope: sc, ContentHash: hash})
		if err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := b.svc.HandleChunkChange(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		replay.add(began)
	}
	b.agrees(t, ds, ids, true)
	if after := b.svc.ConvergeStats(); after.Written != before.Written || after.Removed != before.Removed || after.ChunksRead != before.ChunksRead {
		t.Errorf("replayed changes wrote: before %+v after %+v", before, after)
	}
	mean, calls := replay.mean()
	t.Logf("B: %d changes it held already, applied again without contention: %v on average (one read of the record)", calls, mean)

	// B down while A adds three documents, gives a fourth new content and
	// deletes a fifth; restarted on its volume, it applies what it missed
	// from its position, and says NOT_SERVING until it has.
	b.stop()
	for i := n; i < n+3; i++ {
		ids = append(ids, a.ingest(t, sc, wiki, url(i), fmt.Sprintf("Runbook %d", i), runbook(i, "v1")).GetDocument().GetId())
	}
	a.ingest(t, sc, wiki, url(2), "Runbook 2", runbook(2, "v2"))
	if _, err := a.docs.DeleteDocument(context.Background(), &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: ids[3]}); err != nil {
		t.Fatal(err)
	}
	for _, id := range append(ids[n:], ids[2]) {
		a.settled(t, sc, id)
	}
	b2 := startWith(t, in, startOptions{instance: "b", dir: dirB, noExtraction: true})
	b2.caughtUp(t)
	if st := b2.follower.Stats(); st.Rebuilds != 0 || st.Applied < 5 {
		t.Errorf("B restarted: follower %+v, want the missed changes applied, no rebuild", st)
	}
	if err, reports := b2.health.last(); err != nil || reports != 2 {
		t.Errorf("B restarted: health reports %d, last %v; want NOT_SERVING (catching up), then SERVING", reports, err)
	}
	b2.agrees(t, ds, ids, false)
	b2.waitFound(t, sc, marker(n+2, "v1"), ids[n+2])
	b2.waitFound(t, sc, marker(2, "v2"), ids[2])

	// B down while A changes more, and the stream loses every event B has
	// not applied (as after seven days): B rebuilds from the store.
	b2.stop()
	ids = append(ids, a.ingest(t, sc, wiki, url(n+3), fmt.Sprintf("Runbook %d", n+3), runbook(n+3, "v1")).GetDocument().GetId())
	if _, err := a.docs.DeleteDocument(context.Background(), &indexerv1.DeleteDocumentRequest{Scope: sc, DocumentId: ids[4]}); err != nil {
		t.Fatal(err)
	}
	a.settled(t, sc, ids[n+3])
	stream, err := a.bus.JetStream().Stream(context.Background(), events.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	b3 := startWith(t, in, startOptions{instance: "b", dir: dirB, noExtraction: true})
	b3.caughtUp(t)
	if st := b3.follower.Stats(); st.Rebuilds != 1 {
		t.Errorf("B after the stream lost its position: follower %+v, want one rebuild", st)
	}
	b3.health.mu.Lock()
	reports := slices.Clone(b3.health.reports)
	b3.health.mu.Unlock()
	if !slices.Equal(reports, []error{follow.ErrCatchingUp, follow.ErrRebuilding, nil}) {
		t.Errorf("B rebuilding: health reports %v", reports)
	}
	b3.agrees(t, ds, ids, false)
	b3.waitFound(t, sc, marker(n+3, "v1"), ids[n+3])
	if got := b3.find(t, sc, marker(4, "v1")); len(got) != 0 {
		t.Errorf("B rebuilt still finds the deleted document: %v", got)
	}
}
