package events_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestStreamsEnsuredWhileTheClusterForms: services started together with a
// fresh three-node cluster provision their streams with three replicas in
// one call each, although the cluster has no JetStream leader when they
// ask; and a service asking for one replica does not shrink them.
func TestStreamsEnsuredWhileTheClusterForms(t *testing.T) {
	t.Parallel()
	opts := testkit.NATSClusterOptions(t, 3)
	urls := make([]string, len(opts))
	for i, o := range opts {
		urls[i] = o.URL()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The services start first: their connections wait for a server.
	const services = 3
	var wg sync.WaitGroup
	errs := make([]error, services)
	buses := make([]*events.Bus, services)
	for i := range services {
		wg.Go(func() {
			b, err := events.Connect(ctx, strings.Join(urls, ","), fmt.Sprintf("service-%d", i), nil)
			if err != nil {
				errs[i] = err
				return
			}
			buses[i] = b
			errs[i] = b.EnsureStreamsReplicated(ctx, 3)
		})
	}
	// Then the cluster's servers, together.
	testkit.StartNATSCluster(t, opts)
	wg.Wait()
	for _, b := range buses {
		if b != nil {
			defer b.Close()
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
	}

	if err := buses[0].EnsureStreamsReplicated(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{events.StreamEvents, events.StreamWork, events.StreamDeadLetter, "KV_" + events.EventIDsBucket} {
		s, err := buses[0].JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas, want 3", name, r)
		}
	}
	// The services that raced to create the event-id key map alike.
	var ids []*events.EventIDs
	for i, b := range buses {
		m, err := b.EventIDs(ctx)
		if err != nil {
			t.Fatalf("service %d: %v", i, err)
		}
		ids = append(ids, m)
	}
	for i, m := range ids {
		if m.ID(42) != ids[0].ID(42) {
			t.Errorf("service %d maps 42 to %d, service 0 to %d", i, m.ID(42), ids[0].ID(42))
		}
	}
}

// TestEventIDKeyFollowsTheStreamsReplicas: a mesh that started on one
// replica and is scaled to three gets its event-id key on three servers
// too, as its streams, and keeps the key.
func TestEventIDKeyFollowsTheStreamsReplicas(t *testing.T) {
	t.Parallel()
	opts := testkit.NATSClusterOptions(t, 3)
	testkit.StartNATSCluster(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	connect := func(name string, replicas int) *events.Bus {
		b, err := events.Connect(ctx, opts[0].URL(), name, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		if err := b.EnsureStreamsReplicated(ctx, replicas); err != nil {
			t.Fatal(err)
		}
		return b
	}
	replicas := func(b *events.Bus) int {
		s, err := b.JetStream().Stream(ctx, "KV_"+events.EventIDsBucket)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.Replicas
	}
	first := connect("first", 1)
	if r := replicas(first); r != 1 {
		t.Fatalf("the key's bucket has %d replicas at first, want 1", r)
	}
	before, _ := first.EventIDs(ctx)
	scaled := connect("scaled", 3)
	if r := replicas(scaled); r != 3 {
		t.Errorf("the key's bucket has %d replicas after a service ensured 3, want 3", r)
	}
	after, err := scaled.EventIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID(7) != before.ID(7) {
		t.Error("scaling the bucket changed the key")
	}
}

// TestEnsureStreamsWaitsOnlyForWhatWaitingCanFix: a request the server
// refuses for good returns at once; a cluster that never forms keeps the
// caller waiting until its context ends, and then says what failed.
func TestEnsureStreamsWaitsOnlyForWhatWaitingCanFix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		server   func(t testing.TB) *testkit.NATS
		prepare  func(ctx context.Context, js jetstream.JetStream) error
		replicas int
		timeout  time.Duration
		waits    bool
		want     string
	}{
		{
			name: "replicas on a server outside any cluster", server: testkit.NewNATS,
			replicas: 3, timeout: 30 * time.Second, want: "replicas > 1 not supported",
		},
		{
			name: "an existing stream with another retention", server: testkit.NewNATS,
			prepare: func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: events.StreamWork, Subjects: []string{"am.work.>"}})
				return err
			},
			replicas: 1, timeout: 30 * time.Second, want: events.StreamWork,
		},
		{
			name: "one server of a three-node cluster that never forms", server: loneClusterMember,
			replicas: 3, timeout: 3 * time.Second, waits: true, want: events.StreamEvents,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := tc.server(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			b, err := events.Connect(ctx, s.URL(), "ensure-test", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if tc.prepare != nil {
				if err := tc.prepare(ctx, b.JetStream()); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			err = b.EnsureStreamsReplicated(ctx, tc.replicas)
			took := time.Since(start)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
			if waited := ctx.Err() != nil; waited != tc.waits {
				t.Fatalf("returned after %v (context ended: %v), want waiting until the context ends: %v", took, waited, tc.waits)
			}
		})
	}
}

// loneClusterMember starts one server of a three-node cluster whose other
// servers never come: its JetStream has no leader.
func loneClusterMember(t testing.TB) *testkit.NATS {
	t.Helper()
	return testkit.StartNATSCluster(t, testkit.NATSClusterOptions(t, 3)[:1])[0]
}
