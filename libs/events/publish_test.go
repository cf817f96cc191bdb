package events

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/wrapperspb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

func TestSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"event", EventSubject("acme", "job", "j1", "complete"), "am.evt.acme.job.j1.complete"},
		{"event sanitised", EventSubject("ac.me", "jo*b", "j >1", "done\n"), "am.evt.ac_me.jo_b.j__1.done_"},
		{"event empty tokens", EventSubject("", "job", "", "x"), "am.evt._.job._.x"},
		{"event wildcards", EventSubject("*", ">", "a\tb", "c"), "am.evt._._.a_b.c"},
		{"work", WorkSubject("tool_jobs"), "am.work.tool_jobs"},
		{"work hierarchy", WorkSubject("tools.sql run"), "am.work.tools.sql_run"},
		{"work empty", WorkSubject(""), "am.work._"},
		{"work empty token", WorkSubject("a..>"), "am.work.a._._"},
		{"dead letter", DeadLetterSubject("am.evt.acme.job.j1.complete"), "am.dlq.am.evt.acme.job.j1.complete"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestNewEvent(t *testing.T) {
	t.Parallel()
	scope := &commonv1.Scope{TenantId: "acme", ProjectId: "p1"}
	ev, err := NewEvent("job.complete", "orchestrator", scope, "run-1", wrapperspb.String("hi"))
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	if ev.GetId() == "" || ev.GetTime() == nil {
		t.Fatalf("missing id or time: %v", ev)
	}
	if d := time.Since(ev.GetTime().AsTime()); d < 0 || d > time.Minute {
		t.Errorf("time %v is not now", ev.GetTime().AsTime())
	}
	var payload wrapperspb.StringValue
	if err := ev.GetPayload().UnmarshalTo(&payload); err != nil || payload.GetValue() != "hi" {
		t.Errorf("payload = %v, %v; want hi", payload.GetValue(), err)
	}
	if diff := cmp.Diff(scope, ev.GetScope(), protocmp.Transform()); diff != "" {
		t.Errorf("scope (-want +got):\n%s", diff)
	}
	if ev.GetType() != "job.complete" || ev.GetSource() != "orchestrator" || ev.GetCorrelationId() != "run-1" {
		t.Errorf("unexpected fields: %v", ev)
	}
	other, err := NewEvent("job.complete", "orchestrator", nil, "", nil)
	if err != nil {
		t.Fatalf("NewEvent without payload: %v", err)
	}
	if other.GetId() == ev.GetId() {
		t.Error("two events share an id")
	}
	if other.GetPayload() != nil {
		t.Errorf("payload = %v, want nil", other.GetPayload())
	}
	if _, err := NewEvent("", "orchestrator", nil, "", nil); err == nil {
		t.Error("NewEvent with empty type succeeded")
	}
}

func TestEnsureStreamsIsIdempotent(t *testing.T) {
	t.Parallel()
	b := newBus(t, startNATS(t))
	ctx := testContext(t)
	for i := range 2 {
		if err := b.EnsureStreams(ctx); err != nil {
			t.Fatalf("EnsureStreams call %d: %v", i+1, err)
		}
	}
	tests := []struct {
		stream    string
		subject   string
		retention jetstream.RetentionPolicy
		maxAge    time.Duration
	}{
		{StreamEvents, "am.evt.>", jetstream.LimitsPolicy, 7 * 24 * time.Hour},
		{StreamWork, "am.work.>", jetstream.WorkQueuePolicy, 0},
		{StreamDeadLetter, "am.dlq.>", jetstream.LimitsPolicy, 30 * 24 * time.Hour},
	}
	for _, tt := range tests {
		s, err := b.JetStream().Stream(ctx, tt.stream)
		if err != nil {
			t.Fatalf("stream %s: %v", tt.stream, err)
		}
		cfg := s.CachedInfo().Config
		if len(cfg.Subjects) != 1 || cfg.Subjects[0] != tt.subject {
			t.Errorf("%s subjects = %v, want [%s]", tt.stream, cfg.Subjects, tt.subject)
		}
		if cfg.Retention != tt.retention || cfg.MaxAge != tt.maxAge || cfg.Storage != jetstream.FileStorage ||
			cfg.Duplicates != 2*time.Minute {
			t.Errorf("%s config = retention %v, max age %v, storage %v, duplicates %v", tt.stream,
				cfg.Retention, cfg.MaxAge, cfg.Storage, cfg.Duplicates)
		}
	}
}

func TestPublishSameEventTwiceStoresOnce(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "j1", "complete")
	ev := testEvent(t, "first")

	seq1, err := b.Publish(ctx, subject, ev)
	if err != nil {
		t.Fatalf("first Publish: %v", err)
	}
	seq2, err := b.Publish(ctx, subject, ev)
	if err != nil {
		t.Fatalf("second Publish: %v", err)
	}
	if seq1 != seq2 {
		t.Errorf("duplicate publish returned seq %d, want the original %d", seq2, seq1)
	}
	if n := streamMsgs(t, b, StreamEvents); n != 1 {
		t.Fatalf("stream holds %d messages, want 1", n)
	}

	// The stored message is the envelope, with its subject and headers.
	s, err := b.JetStream().Stream(ctx, StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetMsg(ctx, seq1)
	if err != nil {
		t.Fatalf("GetMsg: %v", err)
	}
	got := &commonv1.Event{}
	if err := proto.Unmarshal(raw.Data, got); err != nil {
		t.Fatalf("stored data is not an Event: %v", err)
	}
	if diff := cmp.Diff(ev, got, protocmp.Transform()); diff != "" {
		t.Errorf("stored event (-want +got):\n%s", diff)
	}
	if got.GetSubject() != subject {
		t.Errorf("event subject = %q, want %q", got.GetSubject(), subject)
	}
	if id := raw.Header.Get(HeaderMsgID); id != ev.GetId() {
		t.Errorf("Nats-Msg-Id = %q, want %q", id, ev.GetId())
	}
	if ct := raw.Header.Get(HeaderContentType); ct != ContentTypeProtobuf {
		t.Errorf("Content-Type = %q", ct)
	}

	// A different event is stored separately.
	seq3, err := b.Publish(ctx, subject, testEvent(t, "second"))
	if err != nil {
		t.Fatalf("third Publish: %v", err)
	}
	if seq3 != seq1+1 {
		t.Errorf("new event seq = %d, want %d", seq3, seq1+1)
	}
}

func TestPublishRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	b := newBusWithStreams(t)
	ctx := testContext(t)
	noID := testEvent(t, "x")
	noID.Id = ""
	tests := []struct {
		name    string
		subject string
		ev      *commonv1.Event
	}{
		{"nil event", "am.evt.a.b.c.d", nil},
		{"no id", "am.evt.a.b.c.d", noID},
		{"wildcard subject", "am.evt.*.b.c.d", testEvent(t, "x")},
		{"empty token", "am.evt..b.c.d", testEvent(t, "x")},
		{"empty subject", "", testEvent(t, "x")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := b.Publish(ctx, tt.subject, tt.ev); err == nil {
				t.Error("Publish succeeded")
			}
		})
	}
}

func TestPublishRetriesUntilStreamExists(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	b := newBus(t, ns)
	ctx := testContext(t)
	subject := EventSubject("acme", "job", "j1", "started")

	// Without a stream the publish keeps failing with "no responders" and
	// gives up when its context ends.
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := b.Publish(short, subject, testEvent(t, "lost")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish without stream: err = %v, want deadline exceeded", err)
	}

	varz, err := ns.Varz(nil)
	if err != nil {
		t.Fatal(err)
	}
	before := varz.InMsgs
	type result struct {
		seq uint64
		err error
	}
	done := make(chan result, 1)
	kept := testEvent(t, "kept")
	go func() {
		seq, err := b.Publish(ctx, subject, kept)
		done <- result{seq, err}
	}()
	// Wait until the publisher has been turned away at least twice, then
	// create the stream: the pending publish must get through.
	waitFor(t, 5*time.Second, "publish attempts", func() bool {
		v, err := ns.Varz(nil)
		return err == nil && v.InMsgs >= before+2
	})
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatalf("EnsureStreams: %v", err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.seq != 1 {
			t.Fatalf("Publish = %d, %v; want 1, nil", r.seq, r.err)
		}
	case <-ctx.Done():
		t.Fatal("publish did not complete after the stream appeared")
	}
}
