package indexer_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
)

// intakeWorkers is how many documents a throughput run has in flight.
const intakeWorkers = 4

// intakeRun is what one throughput run measured.
type intakeRun struct {
	docs, chunks int
	elapsed      time.Duration
	latency      time.Duration // summed over documents: ingest to finished
	model        time.Duration // summed over documents: phases waiting on a model
	cpu          time.Duration // the process's CPU time (every service of the mesh, the simulator)
}

func (r intakeRun) docsPerSec() float64   { return float64(r.docs) / r.elapsed.Seconds() }
func (r intakeRun) chunksPerSec() float64 { return float64(r.chunks) / r.elapsed.Seconds() }
func (r intakeRun) perDoc(d time.Duration) time.Duration {
	return (d / time.Duration(max(r.docs, 1))).Round(10 * time.Microsecond)
}

// BenchmarkIntakeThroughput measures the intake pipeline (the qualifier
// with its model calls, vision for images, routing by route_task; the
// provider a simulator answering at once) beside plain ingest (the same
// documents without attachments, the qualifier's model calls off: rules
// only) in the same run: documents and chunks per second from the ingest
// call to the pipeline's finished event, intakeWorkers in flight. The
// pipeline's cost outside model time is each document's time from ingest
// to finished less its phases that waited on a model (vision stages that
// ran, and content type, log extraction and routing where they spent
// tokens): the target is at most twice plain ingest's.
// b.N rounds of five documents (an e-mail with a PNG, a ticket with a
// screenshot, a wiki page, a 301-line log, plain text) per mode.
func BenchmarkIntakeThroughput(b *testing.B) {
	script := func(sim *providersim.Server) {
		sim.When(providersim.Match{JSON: true, WithImages: true}).JSON(map[string]any{"sender": "Ana Nováková", "key": "PAY-412", "status": "In Review"})
		sim.When(providersim.Match{WithImages: true}).Text("A Grafana panel: ledger p99 latency at 30 seconds.")
		sim.When(providersim.Match{SystemContains: "You classify one document"}).JSON(map[string]any{"contentType": "GENERIC", "reason": "notes"})
		sim.When(providersim.Match{SystemContains: "You summarise application logs"}).JSON(map[string]any{
			"summary": "The ledger timed out under load.", "keyEvents": []string{"08:15 first timeout"}, "criticalDetails": []string{"ERR-5003"}})
		sim.When(providersim.Match{Tools: []string{"route_task"}}).ToolCall("route_task", map[string]any{"decision": "DONE", "reason": "informational"})
	}
	pipeline := startQualifierMesh(b, script)
	plain := startQualifierMeshWith(b, script, map[string]string{"INDEXER_QUALIFIER_MODEL_CALLS": "false", "VISION_ADDR": "127.0.0.1:1"})
	png := qualifierFixture(b, "panel.png")
	eml, log := string(qualifierFixture(b, "incident.eml")), string(qualifierFixture(b, "ledger.log"))
	ticket := "Status: In Review\nIssue Type: Story\nAssignee: Jan Novak\nReporter: Ana Novakova\n\nDescription:\nMake the ledger pool size configurable.\n"
	page := "Author: Jan Novak\nSpace: Payments Engineering\n\n# Ledger runbook\n\nThis page explains how to drain the ledger safely.\n\n## Draining\n\nScale the writers to zero, then wait for the queue to empty.\n"
	plainText := "We meet in Brno in June. Bring walking shoes; the venue is a short hike from the station. Dinner is on the first evening."
	// corpus returns round r's documents, each unique (no unchanged
	// re-ingest), with attachments or without.
	corpus := func(r int, attachments bool) []*indexerv1.IngestDocumentRequest {
		sc := &commonv1.Scope{TenantId: "acme", ProjectId: "bench"}
		img := func(name string) []*indexerv1.Attachment {
			if !attachments {
				return nil
			}
			return []*indexerv1.Attachment{{Name: name, MimeType: "image/png", Data: png}}
		}
		emlText := eml + fmt.Sprintf("\nround %d\n", r)
		if !attachments {
			emlText = strings.Replace(emlText, "Content-Type: image/png", "Content-Type: application/x-bench-stripped", 1)
		}
		return []*indexerv1.IngestDocumentRequest{
			{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_EMAIL, Title: "Ledger timeouts", RawContent: emlText},
			{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_TICKET, Title: fmt.Sprintf("PAY-%d: pool", 1000+r), RawContent: ticket + fmt.Sprintf("Round %d.\n", r), Attachments: img("p99.png")},
			{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_WIKI, Title: "Ledger runbook", RawContent: page + fmt.Sprintf("\nRevision %d.\n", r)},
			{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_LOG, Title: "ledger.log", RawContent: log + fmt.Sprintf("2024-03-12T08:20:01Z INFO bench round %d\n", r)},
			{Scope: sc, SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, Title: "Offsite", RawContent: plainText + fmt.Sprintf(" Round %d.", r)},
		}
	}
	// Warm both (search shards opened, connections made), uncounted.
	intakeThroughput(b, plain, corpus(-1, false))
	intakeThroughput(b, pipeline, corpus(-1, true))

	var plainDocs, pipeDocs []*indexerv1.IngestDocumentRequest
	for r := range b.N {
		plainDocs = append(plainDocs, corpus(r, false)...)
		pipeDocs = append(pipeDocs, corpus(r, true)...)
	}
	b.ResetTimer()
	p := intakeThroughput(b, plain, plainDocs)
	q := intakeThroughput(b, pipeline, pipeDocs)
	b.StopTimer()

	outside := q.perDoc(q.latency - q.model)
	ratio := float64(q.latency-q.model) / float64(max(p.latency-p.model, 1))
	verdict := "met"
	if ratio > 2 {
		verdict = "MISSED"
	}
	fmt.Printf("intake throughput, %d documents per mode, %d in flight, GOMAXPROCS=%d, load average %s\n", p.docs, intakeWorkers, runtime.GOMAXPROCS(0), loadAverage())
	fmt.Printf("  plain ingest (rules, no attachments): %6.1f documents/s %7.1f chunks/s, %v per document from ingest to finished\n",
		p.docsPerSec(), p.chunksPerSec(), p.perDoc(p.latency))
	fmt.Printf("  intake pipeline (models, vision):      %6.1f documents/s %7.1f chunks/s, %v per document, of which %v waiting on models\n",
		q.docsPerSec(), q.chunksPerSec(), q.perDoc(q.latency), q.perDoc(q.model))
	fmt.Printf("  pipeline outside model time: %v per document = %.2fx plain ingest [target <= 2x: %s]\n", outside, ratio, verdict)
	fmt.Printf("  CPU per document (the whole mesh, the simulator too): plain %v, pipeline %v (%.2fx)\n",
		p.perDoc(p.cpu), q.perDoc(q.cpu), float64(q.cpu)/float64(max(p.cpu, 1)))
	b.ReportMetric(p.docsPerSec(), "plain-docs/s")
	b.ReportMetric(q.docsPerSec(), "intake-docs/s")
	b.ReportMetric(p.chunksPerSec(), "plain-chunks/s")
	b.ReportMetric(q.chunksPerSec(), "intake-chunks/s")
	b.ReportMetric(ratio, "outside-model-x-plain")
}

// intakeThroughput ingests docs through m, intakeWorkers at a time, each
// followed with WatchIntake to its finished event, and returns what it
// measured.
func intakeThroughput(b *testing.B, m *qualifierMesh, docs []*indexerv1.IngestDocumentRequest) intakeRun {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var mu sync.Mutex
	run := intakeRun{docs: len(docs)}
	work := make(chan *indexerv1.IngestDocumentRequest)
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for range intakeWorkers {
		wg.Go(func() {
			for req := range work {
				began := time.Now()
				res, err := m.docs.IngestDocument(ctx, req)
				if err != nil {
					b.Error(err)
					continue
				}
				stream, err := m.docs.WatchIntake(ctx, &indexerv1.WatchIntakeRequest{Scope: req.GetScope(), DocumentId: res.GetDocument().GetId()})
				var last *indexerv1.WatchIntakeResponse
				for err == nil {
					var ev *indexerv1.WatchIntakeResponse
					if ev, err = stream.Recv(); err == nil {
						last = ev
					}
				}
				if last.GetName() != "finished" {
					b.Errorf("%s: the watch ended without finished: %v", req.GetTitle(), err)
					continue
				}
				took := time.Since(began)
				p := last.GetEvent().GetPipeline()
				mu.Lock()
				run.latency += took
				run.model += modelTime(p)
				run.chunks += int(p.GetIndexing().GetChunkCount())
				mu.Unlock()
			}
		})
	}
	for _, d := range docs {
		work <- d
	}
	close(work)
	wg.Wait()
	run.elapsed, run.cpu = time.Since(start), processCPU()-cpu0
	return run
}

// modelTime is how long p's phases waited on a model: the vision stages
// that ran, and the phases that spent tokens (content type, a log's
// summary, routing). Those phases' own work is counted in, so the figure
// errs on the side of more model time.
func modelTime(p *indexerv1.IntakePipeline) time.Duration {
	var d time.Duration
	for _, ph := range p.GetPhases() {
		vision := slices.Contains([]string{"vision_stage1", "vision_stage2"}, ph.GetName()) && ph.GetSkipped() == ""
		if vision || ph.GetTokens() > 0 {
			d += ph.GetDuration().AsDuration()
		}
	}
	return d
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the 1, 5 and 15 minute load averages, for reading the
// figures on a shared machine.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
