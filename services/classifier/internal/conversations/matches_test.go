package conversations

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/agentmesh/agentmesh/libs/mongox"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/services/classifier/internal/plan"
)

// preparedStore returns a store on db, Prepared.
func preparedStore(t *testing.T, db *mongo.Database) *Store {
	t.Helper()
	s := NewStore(db)
	if err := s.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

// sampleStore returns a store on db holding the sample in acme.
func sampleStore(t *testing.T, db *mongo.Database) (*Store, []Conversation) {
	t.Helper()
	s := preparedStore(t, db)
	sample, err := Sample()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Upsert(context.Background(), acme, sample); err != nil {
		t.Fatal(err)
	}
	return s, sample
}

// pages walks a run's fetches of filter: each page skips what the pages
// before it returned, as a run skips what it labelled.
func pages(t *testing.T, s *Store, filter bson.D, size int) [][]string {
	t.Helper()
	var out [][]string
	var seen []string
	for {
		ids, err := s.Find(context.Background(), acme, filter, seen, size)
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) == 0 {
			return out
		}
		out = append(out, ids)
		seen = append(seen, ids...)
	}
}

// A run's pages of one plan are the plan's matches in id order, in both
// writer modes; a single writer queries the collection for the first page
// only, and a second run of the same query not at all. An import between
// two pages is seen by the next one.
func TestPagesOfAPlanQueryTheCollectionOnce(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		s, sample := sampleStore(t, db)
		filter, err := plan.Compile(`{"channel": {"$in": ["email", "chat"]}}`)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, c := range sample {
			if c.Channel == "email" || c.Channel == "chat" {
				want = append(want, c.ID)
			}
		}
		slices.Sort(want)
		if len(want) < 10 {
			t.Fatalf("the sample has %d email or chat conversations; the test needs pages", len(want))
		}

		single := mongox.SingleWriter(db)
		finds := func() int {
			_, n, ok := strings.Cut(" "+rt.String(), " find "+Collection+"=")
			if !ok {
				return 0
			}
			n, _, _ = strings.Cut(n, " ")
			v, _ := strconv.Atoi(n)
			return v
		}
		for run := range 2 {
			rt.Reset()
			got := pages(t, s, filter, 3)
			if flat := slices.Concat(got...); !slices.Equal(flat, want) {
				t.Fatalf("run %d: pages %v, want %v in pages of 3", run, got, want)
			}
			wantFinds := len(got) + 1 // each page, and the empty one that ends the walk
			switch {
			case single && run == 0:
				wantFinds = 1
			case single:
				wantFinds = 0
			}
			if n := finds(); n != wantFinds {
				t.Errorf("run %d (single writer %v): %d queries for %d pages, want %d: %s", run, single, n, len(got), wantFinds, rt)
			}
		}

		// An import lands between two pages: the next page has it.
		first, err := s.Find(ctx, acme, filter, nil, 2)
		if err != nil || !slices.Equal(first, want[:2]) {
			t.Fatalf("first page %v (%v), want %v", first, err, want[:2])
		}
		early := sample[0]
		early.ID, early.Channel = "0-imported-later", "chat"
		if _, err := s.Upsert(ctx, acme, []Conversation{early}); err != nil {
			t.Fatal(err)
		}
		next, err := s.Find(ctx, acme, filter, first, 2)
		if err != nil || !slices.Equal(next, []string{early.ID, want[2]}) {
			t.Errorf("page after an import %v (%v), want %v", next, err, []string{early.ID, want[2]})
		}
		// A changed conversation that no longer matches leaves the list.
		moved := early
		moved.Channel = "fax"
		if _, err := s.Upsert(ctx, acme, []Conversation{moved}); err != nil {
			t.Fatal(err)
		}
		if again, err := s.Find(ctx, acme, filter, first, 2); err != nil || !slices.Equal(again, want[2:4]) {
			t.Errorf("page after a conversation left the filter %v (%v), want %v", again, err, want[2:4])
		}
		// Another scope, same filter: its own list.
		if other, err := s.Find(ctx, globex, filter, nil, 10); err != nil || len(other) != 0 {
			t.Errorf("globex sees %v (%v)", other, err)
		}
	})
}

// A scope with more matches than a kept list holds: pages past the kept
// prefix, and pages of a run that labelled most of it, are queried and are
// still the matches in id order.
func TestPagesPastTheKeptPrefix(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, _ *testkit.RoundTrips) {
		ctx := context.Background()
		s := preparedStore(t, db)
		convs := make([]Conversation, matchPrefix+25)
		all := make([]string, len(convs))
		for i := range convs {
			all[i] = fmt.Sprintf("c-%05d", i)
			convs[i] = Conversation{ID: all[i], Channel: "chat", Messages: []Turn{{Role: "customer", Text: "hello"}}}
		}
		if _, err := s.Upsert(ctx, acme, convs); err != nil {
			t.Fatal(err)
		}
		filter := bson.D{{Key: "channel", Value: "chat"}}
		for _, tc := range []struct {
			name     string
			excluded int
			limit    int
		}{
			{"within the prefix", 10, 10},
			{"crossing its end", matchPrefix - 3, 10},
			{"past it", matchPrefix + 5, 10},
			{"the last ones", len(all) - 4, 10},
			{"first page again", 0, 5},
		} {
			got, err := s.Find(ctx, acme, filter, all[:tc.excluded], tc.limit)
			want := all[tc.excluded:min(tc.excluded+tc.limit, len(all))]
			if err != nil || !slices.Equal(got, want) {
				t.Errorf("%s: %v (%v), want %v", tc.name, got, err, want)
			}
		}
	})
}

// A list whose query overlapped a write is not kept, whichever way round
// they overlapped: a write that began before the query and ended after,
// or one that began after the query began.
func TestListsOfQueriesThatOverlappedAWriteAreNotKept(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		before int // writes marked (begun or ended) before the query began
		during int // marked while it ran
	}{
		{"no write", 0, 0},
		{"write began during", 0, 1},
		{"write began before, ended during", 1, 1},
		{"write began and ended during", 0, 2},
		{"write done before", 2, 0},
	} {
		c := newReadCache()
		for range tc.before {
			c.written()
		}
		gen := c.generation()
		for range tc.during {
			c.written()
		}
		c.keep("k", &matchList{ids: []string{"a", "b"}, complete: true}, gen)
		_, kept := c.page("k", nil, 1)
		if want := tc.during == 0; kept != want {
			t.Errorf("%s: kept %v, want %v", tc.name, kept, want)
		}
	}
}

// At most matchLists lists are kept, the least recently used leaving first.
func TestKeptListsAreBounded(t *testing.T) {
	t.Parallel()
	c := newReadCache()
	for i := range matchLists + 1 {
		c.keep(fmt.Sprint(i), &matchList{ids: []string{"a"}, complete: true}, c.generation())
		if i == 0 {
			continue
		}
		c.page("0", nil, 1) // keeps "0" the most recently used
	}
	if n := c.lists.Len(); n != matchLists {
		t.Fatalf("%d lists kept, want %d", n, matchLists)
	}
	if _, ok := c.page("0", nil, 1); !ok {
		t.Error("the most recently used list left")
	}
	if _, ok := c.page("1", nil, 1); ok {
		t.Error("the least recently used list stayed")
	}
}

// Kept conversations stay within their byte bound, the least recently
// read leaving first; one larger than the bound is not kept at all.
func TestKeptConversationsAreBounded(t *testing.T) {
	t.Parallel()
	c := newReadCache()
	big := func(id string, n int) doc {
		return doc{ID: id, Messages: []turnDoc{{Role: "customer", Text: strings.Repeat("x", n)}}}
	}
	quarter := maxKeptConversationBytes / 4
	for i := range 4 {
		c.keepConversation(fmt.Sprint(i), big(fmt.Sprint(i), quarter-1000), c.generation())
	}
	if _, ok := c.conversation("0"); !ok { // now the most recently read
		t.Fatal("a conversation within the bound was not kept")
	}
	c.keepConversation("4", big("4", quarter-1000), c.generation())
	if _, ok := c.conversation("1"); ok {
		t.Error("the least recently read conversation stayed past the bound")
	}
	for _, k := range []string{"0", "2", "3", "4"} {
		if _, ok := c.conversation(k); !ok {
			t.Errorf("conversation %s left", k)
		}
	}
	if c.docs.Cost() > maxKeptConversationBytes {
		t.Errorf("kept %d bytes, bound %d", c.docs.Cost(), maxKeptConversationBytes)
	}
	c.keepConversation("huge", big("huge", maxKeptConversationBytes), c.generation())
	if _, ok := c.conversation("huge"); ok {
		t.Error("a conversation larger than the bound was kept")
	}
}

// A single writer reads a conversation once until a write: a batch's
// conversations that its fetch's sample read, and those another run read,
// cost no round trip; an import of a changed conversation is seen.
func TestConversationsReadOnceUntilAWrite(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, rt *testkit.RoundTrips) {
		ctx := context.Background()
		s, sample := sampleStore(t, db)
		ids := []string{sample[3].ID, sample[1].ID}
		rt.Reset()
		for range 2 {
			if _, err := s.Get(ctx, acme, ids); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Get(ctx, globex, ids[:1]); err == nil {
			t.Error("another scope read acme's kept conversation")
		}
		// globex's miss costs two: by key, then by scope.
		want := fmt.Sprintf("find %s=%d", Collection, 2*len(ids)+2)
		if mongox.SingleWriter(db) {
			want = fmt.Sprintf("find %s=%d", Collection, len(ids)+2)
		}
		if got := rt.String(); !strings.Contains(got, want) {
			t.Errorf("round trips %q, want %s", got, want)
		}
		changed := sample[3]
		changed.Channel = "fax"
		if _, err := s.Upsert(ctx, acme, []Conversation{changed}); err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(ctx, acme, ids)
		if err != nil || got[0].Channel != "fax" || got[1].ID != ids[1] {
			t.Errorf("after an import: %+v (%v), want %s on fax", got, err, ids[0])
		}
	})
}

// While other clients fetch the same plan and read the same conversation
// without pause, every fetch and read that starts after an import ends sees
// the import: no list or conversation read before it is served after it.
func TestReadsRacingImportsSeeEveryFinishedImport(t *testing.T) {
	t.Parallel()
	testkit.EachWriterModeCounted(t, func(t *testing.T, db *mongo.Database, _ *testkit.RoundTrips) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s, sample := sampleStore(t, db)
		filter := bson.D{{Key: "channel", Value: "racing"}}
		c := sample[0]
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					_, _ = s.Find(ctx, acme, filter, nil, 5)
					_, _ = s.Get(ctx, acme, []string{c.ID})
				}
			})
		}
		for i := range 30 {
			c.Channel = []string{"racing", "fax"}[i%2]
			if _, err := s.Upsert(ctx, acme, []Conversation{c}); err != nil {
				t.Fatal(err)
			}
			ids, err := s.Find(ctx, acme, filter, nil, 5)
			if err != nil {
				t.Fatal(err)
			}
			if matched := slices.Equal(ids, []string{c.ID}); matched != (c.Channel == "racing") {
				t.Fatalf("import %d (channel %s): the plan fetched %v", i, c.Channel, ids)
			}
			got, err := s.Get(ctx, acme, []string{c.ID})
			if err != nil || got[0].Channel != c.Channel {
				t.Fatalf("import %d (channel %s): read %+v (%v)", i, c.Channel, got, err)
			}
		}
		cancel()
		wg.Wait()
	})
}
