//go:build e2ecluster

package cluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/events"
	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// logEntry is one message of the events stream.
type logEntry struct {
	seq     uint64
	subject string
	event   *commonv1.Event
}

// eventLog reads every message of the events stream on subjects matching
// filter, straight from the NATS cluster: the suite's independent view of
// what the services published. It tries again while the cluster cannot
// answer (a node was just killed), for up to a minute; failing that, the
// error is a *checkError: the suite could not look, which says nothing of
// the mesh.
func (c *cluster) eventLog(ctx context.Context, filter string) ([]logEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		// Each attempt has its own bound: an ordered consumer asked of a
		// cluster electing a leader can wait out the whole minute (CI: one
		// attempt, "ordered consumer: context deadline exceeded").
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		out, err := c.readEventLog(actx, filter)
		acancel()
		if err == nil {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, &checkError{fmt.Errorf("reading %s from the events stream, %d attempts: %w", filter, attempt, err)}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// eventIDs reads the mesh's event-id key from the cluster (the services'
// bucket, see events.EventIDs): the watches' ids map to the stream's
// sequences with it. It tries again for up to a minute, as eventLog does.
func (c *cluster) eventIDs(ctx context.Context) (*events.EventIDs, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(ctx, 20*time.Second)
		ids, err := func() (*events.EventIDs, error) {
			bus, err := events.Connect(actx, strings.Join(c.natsURLs, ","), "e2e-suite", nil)
			if err != nil {
				return nil, err
			}
			defer bus.Close()
			return bus.EventIDs(actx)
		}()
		acancel()
		if err == nil {
			return ids, nil
		}
		select {
		case <-ctx.Done():
			return nil, &checkError{fmt.Errorf("reading the event-id key, %d attempts: %w", attempt, err)}
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkError is a check of the suite that could not run.
type checkError struct{ err error }

func (e *checkError) Error() string { return e.err.Error() }
func (e *checkError) Unwrap() error { return e.err }

func (c *cluster) readEventLog(ctx context.Context, filter string) ([]logEntry, error) {
	js, closeNATS, err := c.jetStream()
	if err != nil {
		return nil, err
	}
	defer closeNATS()
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer: %w", err)
	}
	var out []logEntry
	seen := map[uint64]bool{} // an ordered consumer that resets delivers again
	for {
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		fresh := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			if seen[md.Sequence.Stream] {
				continue
			}
			seen[md.Sequence.Stream] = true
			fresh++
			var ev commonv1.Event
			if err := proto.Unmarshal(m.Data(), &ev); err != nil {
				return nil, fmt.Errorf("message %d on %s: %w", md.Sequence.Stream, m.Subject(), err)
			}
			out = append(out, logEntry{seq: md.Sequence.Stream, subject: m.Subject(), event: &ev})
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("fetch: %w", err)
		}
		if fresh == 0 {
			return out, nil
		}
	}
}

// runLog returns the run's events from the stream, by their sequence
// within the run; the second result counts sequences found more than once
// with different contents (an event published twice as two events).
func (c *cluster) runLog(ctx context.Context, runID string) (map[uint64]string, int, error) {
	entries, err := c.eventLog(ctx, events.EventSubjectPrefix+"default.classifier."+events.SubjectToken(runID)+".*")
	if err != nil {
		return nil, 0, err
	}
	bySeq := map[uint64]string{}
	ids := map[uint64]string{}
	dup := 0
	for _, e := range entries {
		var re classifierv1.RunEvent
		if err := e.event.GetPayload().UnmarshalTo(&re); err != nil {
			return nil, 0, fmt.Errorf("run event %d: %w", e.seq, err)
		}
		if id, ok := ids[re.GetSequence()]; ok && id != e.event.GetId() {
			dup++
		}
		ids[re.GetSequence()] = e.event.GetId()
		bySeq[re.GetSequence()] = re.GetType()
	}
	return bySeq, dup, nil
}
