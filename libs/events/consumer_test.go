package events

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/testing/protocmp"
)

// fastSpec is a consumer spec with test-friendly delays.
func fastSpec(durable, filter string) ConsumerSpec {
	return ConsumerSpec{
		Stream:        StreamEvents,
		Durable:       durable,
		FilterSubject: filter,
		MaxDeliver:    3,
		AckWait:       5 * time.Second,
		Backoff:       []time.Duration{50 * time.Millisecond},
	}
}

// consume starts a consumer that is stopped when the test ends.
func consume(t *testing.T, b *Bus, spec ConsumerSpec, h Handler) *Consumer {
	t.Helper()
	c, err := b.Consume(testContext(t), spec, h)
	if err != nil {
		t.Fatalf("Consume: %v", err)
	}
	t.Cleanup(c.Stop)
	return c
}

// deadLetter waits for the dead letter of subject and returns it.
func deadLetter(t *testing.T, b *Bus, subject string) *jetstream.RawStreamMsg {
	t.Helper()
	ctx := testContext(t)
	s, err := b.JetStream().Stream(ctx, StreamDeadLetter)
	if err != nil {
		t.Fatal(err)
	}
	var msg *jetstream.RawStreamMsg
	waitFor(t, 10*time.Second, "dead letter on "+DeadLetterSubject(subject), func() bool {
		msg, err = s.GetLastMsgForSubject(ctx, DeadLetterSubject(subject))
		return err == nil
	})
	return msg
}

// consumerSettled reports whether the consumer has nothing pending or
// unacknowledged.
func consumerSettled(t *testing.T, b *Bus, stream, durable string) bool {
	t.Helper()
	c, err := b.JetStream().Consumer(testContext(t), stream, durable)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	info, err := c.Info(testContext(t))
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0
}

func TestConsumeDeliversAndAcks(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "j1", "complete")
	ev := testEvent(t, "payload")
	seq, err := b.Publish(ctx, subject, ev)
	if err != nil {
		t.Fatal(err)
	}

	got := make(chan *Delivery, 10)
	consume(t, b, fastSpec("ok", "am.evt.acme.>"), func(_ context.Context, d *Delivery) error {
		got <- d
		return nil
	})
	var d *Delivery
	select {
	case d = <-got:
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	if diff := cmp.Diff(ev, d.Event, protocmp.Transform()); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if d.Subject != subject || d.Sequence != seq || d.NumDelivered != 1 || d.Stream != StreamEvents || d.Consumer != "ok" {
		t.Errorf("delivery = subject %q seq %d delivered %d stream %q consumer %q",
			d.Subject, d.Sequence, d.NumDelivered, d.Stream, d.Consumer)
	}
	if d.Header.Get(HeaderMsgID) != ev.GetId() {
		t.Errorf("header Nats-Msg-Id = %q", d.Header.Get(HeaderMsgID))
	}
	waitFor(t, 5*time.Second, "ack", func() bool { return consumerSettled(t, b, StreamEvents, "ok") })
	select {
	case d := <-got:
		t.Fatalf("acked message delivered again: %d", d.NumDelivered)
	default:
	}
}

func TestConsumeRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "j2", "complete")
	if _, err := b.Publish(ctx, subject, testEvent(t, "x")); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	var lastDelivered atomic.Uint64
	consume(t, b, fastSpec("flaky", ""), func(_ context.Context, d *Delivery) error {
		lastDelivered.Store(d.NumDelivered)
		if calls.Add(1) < 3 {
			return errors.New("transient")
		}
		return nil
	})
	waitFor(t, 5*time.Second, "third delivery", func() bool { return calls.Load() >= 3 })
	waitFor(t, 5*time.Second, "ack", func() bool { return consumerSettled(t, b, StreamEvents, "flaky") })
	if n := calls.Load(); n != 3 || lastDelivered.Load() != 3 {
		t.Errorf("handler called %d times, last NumDelivered %d; want 3, 3", n, lastDelivered.Load())
	}
	if n := streamMsgs(t, b, StreamDeadLetter); n != 0 {
		t.Errorf("%d dead letters for a message that succeeded", n)
	}
}

func TestConsumeDeadLettersAfterMaxDeliver(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "j3", "complete")
	ev := testEvent(t, "doomed")
	seq, err := b.Publish(ctx, subject, ev)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	consume(t, b, fastSpec("failing", ""), func(context.Context, *Delivery) error {
		calls.Add(1)
		return errors.New("database on fire")
	})

	dl := deadLetter(t, b, subject)
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times before dead-lettering, want MaxDeliver=3", n)
	}
	if r := dl.Header.Get(HeaderDLQReason); !strings.Contains(r, "database on fire") || !strings.Contains(r, "3 deliveries") {
		t.Errorf("reason = %q", r)
	}
	wantHeaders := map[string]string{
		HeaderDLQStream:     StreamEvents,
		HeaderDLQSequence:   strconv.FormatUint(seq, 10),
		HeaderDLQDeliveries: "3",
		HeaderDLQConsumer:   "failing",
		HeaderDLQSubject:    subject,
		HeaderDLQMsgID:      ev.GetId(),
		HeaderContentType:   ContentTypeProtobuf,
	}
	for k, want := range wantHeaders {
		if got := dl.Header.Get(k); got != want {
			t.Errorf("header %s = %q, want %q", k, got, want)
		}
	}
	got, err := decodeEvent(dl.Data)
	if err != nil {
		t.Fatalf("dead letter data: %v", err)
	}
	if diff := cmp.Diff(ev, got, protocmp.Transform()); diff != "" {
		t.Errorf("dead-lettered event (-want +got):\n%s", diff)
	}
	// The original is terminated: nothing pending, no further deliveries.
	waitFor(t, 5*time.Second, "original terminated", func() bool { return consumerSettled(t, b, StreamEvents, "failing") })
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times after dead-lettering", n)
	}
}

func TestConsumeDeadLettersAtOnce(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		publish    func(t *testing.T, b *Bus, subject string)
		handler    Handler
		wantCalls  int32
		wantReason string
	}{
		{
			name: "permanent error",
			publish: func(t *testing.T, b *Bus, subject string) {
				if _, err := b.Publish(testContext(t), subject, testEvent(t, "x")); err != nil {
					t.Fatal(err)
				}
			},
			handler:    func(context.Context, *Delivery) error { return Permanent(errors.New("unknown job kind")) },
			wantCalls:  1,
			wantReason: "permanent: unknown job kind",
		},
		{
			name: "undecodable message",
			publish: func(t *testing.T, b *Bus, subject string) {
				if _, err := b.JetStream().Publish(testContext(t), subject, []byte("not a protobuf")); err != nil {
					t.Fatal(err)
				}
			},
			handler:    func(context.Context, *Delivery) error { return nil },
			wantCalls:  0,
			wantReason: "decode event",
		},
		{
			name: "panic on last delivery",
			publish: func(t *testing.T, b *Bus, subject string) {
				if _, err := b.Publish(testContext(t), subject, testEvent(t, "x")); err != nil {
					t.Fatal(err)
				}
			},
			handler:    func(context.Context, *Delivery) error { panic("nil map") },
			wantCalls:  3,
			wantReason: "handler panic: nil map",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newBusWithStreams(t)
			subject := EventSubject("acme", "case", strconv.Itoa(i), "x")
			tt.publish(t, b, subject)
			var calls atomic.Int32
			consume(t, b, fastSpec("c", ""), func(ctx context.Context, d *Delivery) error {
				calls.Add(1)
				return tt.handler(ctx, d)
			})
			dl := deadLetter(t, b, subject)
			if r := dl.Header.Get(HeaderDLQReason); !strings.Contains(r, tt.wantReason) {
				t.Errorf("reason = %q, want it to contain %q", r, tt.wantReason)
			}
			waitFor(t, 5*time.Second, "original terminated", func() bool { return consumerSettled(t, b, StreamEvents, "c") })
			if n := calls.Load(); n != tt.wantCalls {
				t.Errorf("handler called %d times, want %d", n, tt.wantCalls)
			}
		})
	}
}

func TestConsumeWorkQueueRemovesAckedMessages(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := WorkSubject("tool_jobs")
	const n = 20
	for i := range n {
		if _, err := b.Publish(ctx, subject, testEvent(t, strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	var handled atomic.Int32
	var inFlight, maxInFlight atomic.Int32
	spec := fastSpec("tools", subject)
	spec.Stream = StreamWork
	spec.Concurrency = 4
	consume(t, b, spec, func(context.Context, *Delivery) error {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if cur <= m || maxInFlight.CompareAndSwap(m, cur) {
				break
			}
		}
		handled.Add(1)
		return nil
	})
	waitFor(t, 10*time.Second, "work queue drained", func() bool { return streamMsgs(t, b, StreamWork) == 0 })
	if h := handled.Load(); h != n {
		t.Errorf("handled %d messages, want %d", h, n)
	}
	if m := maxInFlight.Load(); m > 4 {
		t.Errorf("%d handlers ran at once, want at most Concurrency=4", m)
	}
}

func TestTraceContextRoundTrips(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	ctx, span := tp.Tracer("test").Start(testContext(t), "publisher")
	want := span.SpanContext()
	subject := EventSubject("acme", "trace", "t1", "x")
	if _, err := b.Publish(ctx, subject, testEvent(t, "traced")); err != nil {
		t.Fatal(err)
	}
	span.End()

	got := make(chan trace.SpanContext, 1)
	consume(t, b, fastSpec("tracer", subject), func(ctx context.Context, d *Delivery) error {
		if trace.SpanContextFromContext(ctx).TraceID() != trace.SpanContextFromContext(d.Context()).TraceID() {
			t.Error("handler ctx and Delivery.Context() disagree")
		}
		got <- trace.SpanContextFromContext(d.Context())
		return nil
	})
	select {
	case sc := <-got:
		if sc.TraceID() != want.TraceID() {
			t.Errorf("delivery trace id = %s, want %s", sc.TraceID(), want.TraceID())
		}
		if !sc.IsSampled() {
			t.Error("sampled flag lost")
		}
	case <-testContext(t).Done():
		t.Fatal("no delivery")
	}
}

func TestConsumerStopWaitsForHandlers(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	subject := EventSubject("acme", "job", "slow", "x")
	if _, err := b.Publish(testContext(t), subject, testEvent(t, "x")); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	release := make(chan struct{})
	var finished atomic.Bool
	c, err := b.Consume(testContext(t), fastSpec("slow", subject), func(context.Context, *Delivery) error {
		close(started)
		<-release
		finished.Store(true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	stopped := make(chan struct{})
	go func() {
		c.Stop()
		close(stopped)
	}()
	close(release)
	<-stopped
	if !finished.Load() {
		t.Fatal("Stop returned before the in-flight handler finished")
	}
	select {
	case <-c.Done():
	default:
		t.Error("Done not closed after Stop")
	}
	c.Stop() // idempotent
	waitFor(t, 5*time.Second, "ack of the in-flight message", func() bool { return consumerSettled(t, b, StreamEvents, "slow") })
}

// A consumer takes a message only when a handler is free for it: while
// its one handler is busy, the next message goes to another instance at
// once, on its first delivery, instead of waiting in the busy one's buffer
// until its ack wait runs out.
func TestConsumeTakesOnlyWhatAFreeHandlerCanHandle(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "busy", "x")
	spec := fastSpec("busy", subject)
	spec.AckWait = 30 * time.Second // far beyond the test: a buffered message would not come back in time
	release := make(chan struct{})
	defer close(release)
	first := make(chan string, 2)
	consume(t, b, spec, func(_ context.Context, d *Delivery) error {
		first <- d.Event.GetId()
		<-release
		return nil
	})
	if _, err := b.Publish(ctx, subject, testEvent(t, "one")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-ctx.Done():
		t.Fatal("no delivery to the first instance")
	}
	second := make(chan *Delivery, 2)
	consume(t, b, spec, func(_ context.Context, d *Delivery) error {
		second <- d
		return nil
	})
	ev := testEvent(t, "two")
	if _, err := b.Publish(ctx, subject, ev); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-second:
		if d.Event.GetId() != ev.GetId() || d.NumDelivered != 1 {
			t.Errorf("second instance got %s on delivery %d, want %s on delivery 1", d.Event.GetId(), d.NumDelivered, ev.GetId())
		}
	case id := <-first:
		t.Fatalf("the busy instance took %s while its handler was busy", id)
	case <-time.After(10 * time.Second):
		t.Fatal("the free instance did not get the message while the other was busy")
	}
}

// A handler that runs for several ack waits keeps its message (the
// consumer extends the ack wait while it runs), and the message queued
// behind it is not redelivered meanwhile: each is handled once.
func TestConsumeShortAckWaitLongHandler(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "long", "x")
	spec := fastSpec("long", subject)
	spec.AckWait = 500 * time.Millisecond
	var mu sync.Mutex
	var got []string // "<payload id>/<delivery>"
	consume(t, b, spec, func(_ context.Context, d *Delivery) error {
		mu.Lock()
		got = append(got, fmt.Sprintf("%s/%d", d.Event.GetId(), d.NumDelivered))
		n := len(got)
		mu.Unlock()
		if n == 1 {
			<-time.After(4 * spec.AckWait) // the work under test: longer than the ack wait
		}
		return nil
	})
	var want []string
	for _, text := range []string{"one", "two"} {
		ev := testEvent(t, text)
		if _, err := b.Publish(ctx, subject, ev); err != nil {
			t.Fatal(err)
		}
		want = append(want, ev.GetId()+"/1")
	}
	waitFor(t, 10*time.Second, "both handled and acknowledged", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 2 && consumerSettled(t, b, StreamEvents, "long")
	})
	// Anything redelivered would arrive within an ack wait or two.
	<-time.After(3 * spec.AckWait)
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
}

func TestConsumeStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx, cancel := context.WithCancel(testContext(t))
	c, err := b.Consume(ctx, fastSpec("ctx", ""), func(context.Context, *Delivery) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("consumer still running after its context ended")
	}
}

func TestConsumeRejectsBadSpec(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ok := func(context.Context, *Delivery) error { return nil }
	tests := []struct {
		name string
		spec ConsumerSpec
		h    Handler
	}{
		{"no stream", ConsumerSpec{Durable: "d"}, ok},
		{"no durable", ConsumerSpec{Stream: StreamEvents}, ok},
		{"nil handler", ConsumerSpec{Stream: StreamEvents, Durable: "d"}, nil},
		{"negative", ConsumerSpec{Stream: StreamEvents, Durable: "d", MaxDeliver: -1}, ok},
		{"missing stream", ConsumerSpec{Stream: "NOPE", Durable: "d"}, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if c, err := b.Consume(testContext(t), tt.spec, tt.h); err == nil {
				c.Stop()
				t.Error("Consume succeeded")
			}
		})
	}
}

func TestPermanent(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	err := Permanent(base)
	if !IsPermanent(err) || !errors.Is(err, base) || err.Error() != "bad input" {
		t.Errorf("Permanent(base) = %v, IsPermanent %v, Is base %v", err, IsPermanent(err), errors.Is(err, base))
	}
	wrapped := errors.Join(errors.New("ctx"), err)
	if !IsPermanent(wrapped) {
		t.Error("wrapped permanent error not recognised")
	}
	if IsPermanent(base) || Permanent(nil) != nil {
		t.Error("plain error reported permanent, or Permanent(nil) != nil")
	}
}
