package mongox

import (
	"testing"
	"time"
)

// Locks: one key's holder makes the next wait, other keys go, and a key's
// mutex is dropped once nobody holds or waits for it.
func TestLocksByKey(t *testing.T) {
	var ls Locks
	unlockA := ls.Lock("a")
	gotB := make(chan func())
	go func() { gotB <- ls.Lock("b") }()
	select {
	case unlockB := <-gotB:
		unlockB()
	case <-time.After(5 * time.Second):
		t.Fatal("key b waited for key a")
	}
	gotA := make(chan func())
	go func() { gotA <- ls.Lock("a") }()
	select {
	case <-gotA:
		t.Fatal("key a was taken twice")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	select {
	case unlock := <-gotA:
		unlock()
	case <-time.After(5 * time.Second):
		t.Fatal("key a was not handed on")
	}
	ls.mu.Lock()
	left := len(ls.m)
	ls.mu.Unlock()
	if left != 0 {
		t.Errorf("%d mutexes kept after every lock was released", left)
	}
}
