package events_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/agentmesh/agentmesh/libs/events"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
)

// TestReplaySurvivesTheDeathOfItsServer: a watch replaying a three-replica
// stream keeps delivering, in order and without gaps, after the server
// holding its consumer, or the stream's leader, is killed.
func TestReplaySurvivesTheDeathOfItsServer(t *testing.T) {
	t.Parallel()
	for _, victim := range []string{"consumer", "stream leader"} {
		t.Run(victim, func(t *testing.T) {
			t.Parallel()
			servers := testkit.StartNATSCluster(t, testkit.NATSClusterOptions(t, 3))
			urls := make([]string, len(servers))
			for i, s := range servers {
				urls[i] = s.URL()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			connect := func(name string) *events.Bus {
				b, err := events.Connect(ctx, strings.Join(urls, ","), name, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Close() })
				return b
			}
			pub, watcher := connect("publisher"), connect("watcher")
			if err := pub.EnsureStreamsReplicated(ctx, 3); err != nil {
				t.Fatal(err)
			}
			subject := events.EventSubject("acme", "job", "j1", "progress")
			publish := func(i int) {
				payload, _ := anypb.New(wrapperspb.String(fmt.Sprint(i)))
				ev := &commonv1.Event{Id: fmt.Sprintf("ev-%d", i), Subject: subject, Payload: payload,
					Scope: &commonv1.Scope{TenantId: "acme"}}
				for {
					if _, err := pub.Publish(ctx, subject, ev); err == nil {
						return
					} else if ctx.Err() != nil {
						t.Fatalf("publish %d: %v", i, err)
					}
					<-time.After(100 * time.Millisecond)
				}
			}
			got := make(chan string, 100)
			errStop := errors.New("stop")
			done := make(chan error, 1)
			go func() {
				done <- watcher.Replay(ctx, events.StreamEvents, subject, 0, func(_ uint64, ev *commonv1.Event) error {
					got <- ev.GetId()
					if ev.GetId() == "ev-9" {
						return errStop
					}
					return nil
				})
			}()
			next := 0
			expect := func(upTo int) {
				t.Helper()
				for ; next <= upTo; next++ {
					select {
					case id := <-got:
						if want := fmt.Sprintf("ev-%d", next); id != want {
							t.Fatalf("replay delivered %s, want %s", id, want)
						}
					case <-time.After(45 * time.Second):
						t.Fatalf("replay stalled before ev-%d", next)
					}
				}
			}
			for i := range 5 {
				publish(i)
			}
			expect(4)

			js := pub.JetStream()
			stream, err := js.Stream(ctx, events.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			info, err := stream.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			target := info.Cluster.Leader
			if victim == "consumer" {
				names := stream.ConsumerNames(ctx)
				for name := range names.Name() {
					c, err := stream.Consumer(ctx, name)
					if err != nil {
						t.Fatal(err)
					}
					target = c.CachedInfo().Cluster.Leader
				}
			}
			killed := false
			for _, s := range servers {
				if s.Server().Name() == target {
					s.Shutdown()
					killed = true
				}
			}
			if !killed {
				t.Fatalf("no server named %q", target)
			}
			start := time.Now()
			for i := 5; i < 10; i++ {
				publish(i)
			}
			expect(9)
			t.Logf("killed %s (%s); the replay delivered the next 5 events %v later", victim, target, time.Since(start).Round(time.Millisecond))
			if err := <-done; !errors.Is(err, errStop) {
				t.Fatalf("Replay = %v", err)
			}
		})
	}
}
