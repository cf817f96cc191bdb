package main

import (
	"sync"
	"testing"
	"time"
)

func TestRequestIDFromEitherPath(t *testing.T) {
	for _, stream := range []bool{false, true} {
		if id, ok := requestID(directBody("bench-model", 4217, stream)); !ok || id != 4217 {
			t.Errorf("direct body (stream %v): id %d, %v; want 4217", stream, id, ok)
		}
	}
	// What the gateway sends upstream: the message re-encoded, other
	// fields around it.
	body := []byte(`{"model":"bench-model","messages":[{"role":"user","content":"Summarise the quarter in one sentence. #9"}],"stream":false}`)
	if id, ok := requestID(body); !ok || id != 9 {
		t.Errorf("gateway body: id %d, %v; want 9", id, ok)
	}
	if _, ok := requestID([]byte(`{"messages":[]}`)); ok {
		t.Error("a body without an id gave one")
	}
}

func TestAlarmsWakeEachWaiterAfterItsWait(t *testing.T) {
	const d = 5 * time.Millisecond
	a := newAlarms(d)
	var wg sync.WaitGroup
	took := make([]time.Duration, 20)
	for i := range took {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			a.wait()
			took[i] = time.Since(start)
		}()
		time.Sleep(200 * time.Microsecond) // deadlines spread out, as under load
	}
	wg.Wait()
	for i, dt := range took {
		if dt < d || dt > d+200*time.Millisecond {
			t.Errorf("waiter %d woke after %v; want %v (and not much more)", i, dt, d)
		}
	}
}

func TestLegsJoinRequestsWithTheMocksNotes(t *testing.T) {
	ms := int64(time.Millisecond)
	s := sample{reqs: []request{
		{id: 1, due: 100 * ms, startLate: time.Millisecond, lat: 25 * time.Millisecond},
		{id: 2, due: 200 * ms, lat: 30 * time.Millisecond}, // the mock has no note of it
		{id: 3, due: 300 * ms}, // never finished
	}}
	var l legs
	l.add(s, map[int64]arrival{1: {read: 102 * ms, woke: 122 * ms}, 3: {read: 301 * ms, woke: 321 * ms}})
	if len(l.request) != 1 {
		t.Fatalf("joined %d requests, want 1", len(l.request))
	}
	if l.start[0] != time.Millisecond || l.request[0] != 2*time.Millisecond || l.wait[0] != 20*time.Millisecond || l.response[0] != 3*time.Millisecond {
		t.Errorf("legs start %v request %v wait %v response %v; want 1ms 2ms 20ms 3ms", l.start[0], l.request[0], l.wait[0], l.response[0])
	}
}
