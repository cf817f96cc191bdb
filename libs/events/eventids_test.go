package events

import (
	"bytes"
	"slices"
	"sync"
	"testing"
)

// TestEventIDsArePermuted: ids and sequences map both ways one to one, 0
// stays 0, ids fit a JavaScript number, and consecutive sequences get
// unrelated ids (no order, no gaps to count).
func TestEventIDsArePermuted(t *testing.T) {
	t.Parallel()
	m, err := NewEventIDs(bytes.Repeat([]byte{7}, 16))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID(0) != 0 || m.Seq(0) != 0 {
		t.Fatalf("0 maps to id %d, seq %d", m.ID(0), m.Seq(0))
	}
	seen := map[uint64]uint64{}
	var ids []uint64
	for seq := uint64(1); seq <= 20000; seq++ {
		id := m.ID(seq)
		if id == 0 || id >= 1<<53 {
			t.Fatalf("seq %d: id %d is 0 or beyond 2^53", seq, id)
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("seq %d and %d share id %d", seq, other, id)
		}
		seen[id] = seq
		if back := m.Seq(id); back != seq {
			t.Fatalf("seq %d: id %d maps back to %d", seq, id, back)
		}
		ids = append(ids, id)
	}
	if slices.IsSorted(ids) {
		t.Fatal("ids keep the sequences' order")
	}
	ascending := 0
	for i := 1; i < len(ids); i++ {
		if ids[i] > ids[i-1] {
			ascending++
		}
	}
	if ascending < len(ids)*4/10 || ascending > len(ids)*6/10 {
		t.Errorf("%d of %d consecutive ids ascend, want about half", ascending, len(ids)-1)
	}
	// The sequence the permutation sends to 0 gets 0's image, both ways.
	var inner EventIDs = *m
	if s0 := inner.permute(0, true); s0 != 0 {
		if id := m.ID(s0); id != inner.permute(0, false) || m.Seq(id) != s0 {
			t.Errorf("seq %d (permuted to 0): id %d, back %d", s0, id, m.Seq(id))
		}
	}
	// Guessed ids name sequences far beyond any stream's.
	far := 0
	for id := uint64(1); id <= 1000; id++ {
		if m.Seq(id) > 1<<40 {
			far++
		}
	}
	if far < 990 {
		t.Errorf("ids 1..1000 decode beyond 2^40 %d times, want nearly all", far)
	}
	// Another key maps otherwise.
	o, _ := NewEventIDs(bytes.Repeat([]byte{8}, 16))
	if o.ID(1) == m.ID(1) && o.ID(2) == m.ID(2) {
		t.Error("two keys map alike")
	}
	if _, err := NewEventIDs([]byte("short")); err == nil {
		t.Error("a 5-byte key was taken")
	}
}

// TestEventIDsAreSharedThroughTheBucket: buses of one server that start at
// once map alike (one key is created, the others read it), and a bus that
// connects later reads the same key.
func TestEventIDsAreSharedThroughTheBucket(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	ctx := testContext(t)
	buses := make([]*Bus, 4)
	for i := range buses {
		buses[i] = newBus(t, ns)
	}
	got := make([]*EventIDs, len(buses))
	var wg sync.WaitGroup
	for i, b := range buses {
		wg.Go(func() {
			ids, err := b.EventIDs(ctx)
			if err != nil {
				t.Errorf("bus %d: %v", i, err)
			}
			got[i] = ids
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	late := newBus(t, ns)
	if err := late.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	ids, err := late.EventIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, ids)
	for i, m := range got {
		for _, seq := range []uint64{1, 2, 12345} {
			if m.ID(seq) != got[0].ID(seq) {
				t.Fatalf("bus %d maps seq %d to %d, bus 0 to %d", i, seq, m.ID(seq), got[0].ID(seq))
			}
		}
	}
	if got[0].ID(1) == 1 {
		t.Error("seq 1 is its own id")
	}
}
