package events_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestStreamsReplicatedOnACluster: on a three-node cluster the streams get
// three replicas, and a service asking for one does not shrink them.
func TestStreamsReplicatedOnACluster(t *testing.T) {
	t.Parallel()
	servers := testkit.NewNATSCluster(t, 3)
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.URL()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := events.Connect(ctx, strings.Join(urls, ","), "replicas-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// The cluster elects its JetStream leader after the servers meet.
	var last error
	testkit.Eventually(t, 20*time.Second, func() bool {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		last = b.EnsureStreamsReplicated(actx, 3)
		return last == nil
	}, "streams with 3 replicas: %v", errPtr{&last})
	if err := b.EnsureStreamsReplicated(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{events.StreamEvents, events.StreamWork, events.StreamDeadLetter} {
		s, err := b.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas, want 3", name, r)
		}
	}
}

// errPtr prints the error it points to when formatted.
type errPtr struct{ p *error }

func (e errPtr) String() string { return fmt.Sprint(*e.p) }
