package testkit

import (
	"context"
	"testing"

	"github.com/agentmesh/agentmesh/libs/events"
)

// EventIDs returns the mapping between event ids and AM_EVENTS sequences
// that the services on the NATS server at url use (events.EventIDs), for a
// test that checks the ids a watch sent against the stream.
func EventIDs(t testing.TB, url string) *events.EventIDs {
	t.Helper()
	bus, err := events.Connect(context.Background(), url, "test-event-ids", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.Close()
	ids, err := bus.EventIDs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
