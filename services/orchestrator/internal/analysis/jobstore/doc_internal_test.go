package jobstore

import (
	"bytes"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// docOf writes the bytes the driver writes for the job's fields followed
// by the outbox: the document as a bson.D of both encodes.
func TestDocOfEncodesTheJobThenItsOutbox(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	j := &analysis.Job{ID: "job-1", RootID: "job-1", Type: analysis.TypeAnalysis, Status: analysis.StatusRunning,
		Tenant: "acme", Project: "research", Title: "ünïcode \x00 title", CreateTime: at, UpdateTime: at, Version: 3}
	outbox := []events.OutboxEntry{
		{ID: "e1", Subject: "am.evt.acme.job.job-1", Data: []byte(`{"a":1}`)},
		{ID: "e2", Subject: "am.work.analysis", Data: []byte{}},
	}
	for _, entries := range [][]events.OutboxEntry{nil, outbox[:1], outbox} {
		got, err := docOf(j, entries)
		if err != nil {
			t.Fatal(err)
		}
		d, err := toDoc(j)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 0 {
			d = append(d, bson.E{Key: events.OutboxField, Value: entries})
		}
		want, err := bson.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d entries: docOf wrote\n%x\nwant\n%x", len(entries), []byte(got), want)
		}
		if err := bson.Raw(got).Validate(); err != nil {
			t.Errorf("%d entries: %v", len(entries), err)
		}
	}
}
