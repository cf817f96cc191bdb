package lru

import (
	"fmt"
	"testing"
)

// The least recently used values leave first once the total cost is over
// the bound; a read or a replacement makes a value the most recently used.
func TestLeastRecentlyUsedLeaveFirst(t *testing.T) {
	t.Parallel()
	c := New[string](3)
	for i := range 3 {
		c.Put(fmt.Sprint(i), fmt.Sprint("v", i), 1)
	}
	c.Get("0")
	c.Put("1", "v1'", 1)
	c.Put("3", "v3", 1) // "2" is the least recently used
	if _, ok := c.Get("2"); ok {
		t.Error("the least recently used value stayed")
	}
	for k, want := range map[string]string{"0": "v0", "1": "v1'", "3": "v3"} {
		if v, ok := c.Get(k); !ok || v != want {
			t.Errorf("Get(%s) = %q, %v; want %q", k, v, ok, want)
		}
	}
	if c.Len() != 3 || c.Cost() != 3 {
		t.Errorf("len %d cost %d, want 3 and 3", c.Len(), c.Cost())
	}
}

// Costs add up: one value may push out several; one over the bound alone
// is not kept and leaves the others; Clear empties the cache.
func TestCostBoundsTheTotal(t *testing.T) {
	t.Parallel()
	c := New[int](10)
	c.Put("a", 1, 4)
	c.Put("b", 2, 4)
	c.Put("c", 3, 2)
	c.Put("d", 4, 8) // pushes out a and b
	if _, ok := c.Get("a"); ok {
		t.Error("a stayed")
	}
	if _, ok := c.Get("b"); ok {
		t.Error("b stayed")
	}
	if c.Cost() != 10 || c.Len() != 2 {
		t.Errorf("cost %d len %d, want 10 and 2", c.Cost(), c.Len())
	}
	c.Put("huge", 5, 11)
	if _, ok := c.Get("huge"); ok || c.Len() != 2 {
		t.Errorf("a value over the bound was kept, or pushed others out (len %d)", c.Len())
	}
	c.Clear()
	if c.Len() != 0 || c.Cost() != 0 {
		t.Errorf("after Clear: len %d cost %d", c.Len(), c.Cost())
	}
	if _, ok := c.Get("d"); ok {
		t.Error("d stayed after Clear")
	}
}
