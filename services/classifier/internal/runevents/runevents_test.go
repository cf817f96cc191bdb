package runevents

import (
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

func TestChunksKeepRunesWhole(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("héllo wörld ✓ ", 20)
	for _, size := range []int{1, 2, 3, 7, 50, 1000} {
		chunks := Chunks(text, size)
		if strings.Join(chunks, "") != text {
			t.Fatalf("size %d: chunks do not add up", size)
		}
		for _, c := range chunks {
			if !utf8.ValidString(c) && size >= utf8.UTFMax {
				t.Errorf("size %d: chunk %q splits a rune", size, c)
			}
			if len(c) > max(size, utf8.UTFMax) {
				t.Errorf("size %d: chunk of %d bytes", size, len(c))
			}
		}
	}
	if Chunks("", 10) != nil {
		t.Error("empty text gave chunks")
	}
}

func TestStreamShapesStartedDeltaDone(t *testing.T) {
	t.Parallel()
	evs := Stream("agent.run.summary", "Generating run summary...", "Summary generation completed", "abcdef", 4)
	want := []string{SummaryStarted, SummaryDelta, SummaryDelta, SummaryDone}
	for i, e := range evs {
		if e.Type != want[i] {
			t.Fatalf("event %d %s, want %s", i, e.Type, want[i])
		}
	}
	if evs[0].LogMessage == "" || evs[1].LogMessage != "" || evs[1].Data != "abcd" || evs[3].LogMessage == "" {
		t.Errorf("events %+v", evs)
	}
}

// An event survives the trip through the outbox envelope unchanged, on a
// subject the run's filter matches and no other run's does.
func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	scope := &commonv1.Scope{TenantId: "acme.corp", ProjectId: "p"}
	e := Event{Type: AwaitingFetchApproval, LogMessage: "Waiting", Data: map[string]any{
		"fetchedData": map[string]any{"conversationIds": []string{"a", "b"}, "conversationCount": 2},
	}}
	entry, err := e.Envelope(scope, "run-1", 7)
	if err != nil {
		t.Fatal(err)
	}
	if !subjectMatches(SubjectFilter("acme.corp", "run-1"), entry.Subject) || subjectMatches(SubjectFilter("acme.corp", "run-2"), entry.Subject) {
		t.Errorf("subject %s vs filter %s", entry.Subject, SubjectFilter("acme.corp", "run-1"))
	}
	env := &commonv1.Event{}
	if err := proto.Unmarshal(entry.Data, env); err != nil {
		t.Fatal(err)
	}
	if env.GetId() != entry.ID || env.GetType() != AwaitingFetchApproval || env.GetCorrelationId() != "run-1" || env.GetSource() != Source {
		t.Errorf("envelope %v", env)
	}
	re, err := Decode(env)
	if err != nil {
		t.Fatal(err)
	}
	ids := re.GetData().GetStructValue().GetFields()["fetchedData"].GetStructValue().GetFields()["conversationIds"].GetListValue().AsSlice()
	if re.GetSequence() != 7 || re.GetLogMessage() != "Waiting" || re.GetRunId() != "run-1" || len(ids) != 2 || re.GetTime() == nil {
		t.Errorf("decoded %v", re)
	}
	delta, err := Event{Type: SummaryDelta, Data: "text"}.Proto("r")
	if err != nil || delta.GetData().GetStringValue() != "text" {
		t.Errorf("delta data %v (%v)", delta.GetData(), err)
	}
}

// subjectMatches applies NATS wildcard rules ('*' one token, '>' the rest).
func subjectMatches(filter, subject string) bool {
	return matchTokens(strings.Split(filter, "."), strings.Split(subject, "."))
}

func matchTokens(f, s []string) bool {
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}

// A run's events share four subjects: JetStream keeps state for each
// subject its events stream holds. The kind says what a consumer may pick
// by subject: a run's start or resumption, an approval it waits for, its
// end, or any other event.
func TestSubjectsByKind(t *testing.T) {
	t.Parallel()
	for typ, kind := range map[string]string{
		RunStarted: "started", RunResumed: "started",
		AwaitingFetchApproval: "awaiting", AwaitingBatchApproval: "awaiting",
		RunCompleted: "ended", RunStopped: "ended",
		RunError: "event", Replanning: "event", SummaryDelta: "event", BatchData: "event", FinalData: "event",
	} {
		if got, want := Subject("acme.corp", "run-1", typ), "am.evt.acme_corp.classifier.run-1."+kind; got != want {
			t.Errorf("%s: subject %s, want %s", typ, got, want)
		}
	}
}
