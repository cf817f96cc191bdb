package indexer_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/agentmesh/agentmesh/libs/config"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/indexer/indexer"
	"github.com/agentmesh/agentmesh/services/modelgateway/modelgatewaytest"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// qualifierMesh is an indexer in front of the real vision service and
// model gateway, whose provider is a simulator the test scripts.
type qualifierMesh struct {
	sim    *providersim.Server
	conn   *grpc.ClientConn // to the indexer
	docs   indexerv1.DocumentServiceClient
	search indexerv1.SearchServiceClient
	graph  indexerv1.GraphServiceClient
	events *intakeEvents
	nats   string // the NATS server's URL
}

// intakeEvents records the intake.* events published on NATS.
type intakeEvents struct {
	mu   sync.Mutex
	evs  map[string][]*indexerv1.IntakePhaseEvent // guarded by mu: by document id, in arrival order
	seen map[string]bool                          // guarded by mu: event ids (a relay may publish one twice)
}

func (e *intakeEvents) of(docID string) []*indexerv1.IntakePhaseEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.evs[docID])
}

// startQualifierMesh starts the mesh with the simulator's rules set by
// script, before any request can reach it.
func startQualifierMesh(t testing.TB, script func(sim *providersim.Server)) *qualifierMesh {
	t.Helper()
	return startQualifierMeshWith(t, script, nil)
}

// startQualifierMeshWith is startQualifierMesh with the indexer's
// environment amended by env.
func startQualifierMeshWith(t testing.TB, script func(sim *providersim.Server), env map[string]string) *qualifierMesh {
	t.Helper()
	sim := providersim.Start(t, providersim.Preset(providersim.OpenAI))
	script(sim)
	routing := fmt.Sprintf("providers:\n  up: {type: openai, base_url: %q}\nmodels:\n  vision:\n    - {provider: up, model: sim-vl}\n  chat:\n    - {provider: up, model: sim-chat}\n", sim.URL)
	gwAddr := modelgatewaytest.Start(t, routing, map[string]string{"MODELGATEWAY_PROBE_INTERVAL": "1h", "OPENAI_API_KEY": "test-key"})
	var visCfg vision.Config
	if err := config.Load("", &visCfg, config.Map(map[string]string{"MODELGATEWAY_ADDR": gwAddr})); err != nil {
		t.Fatal(err)
	}
	visAddr := testkit.RunService(t, "vision", func(ctx context.Context, rt service.Runtime) error {
		return vision.Run(ctx, &visCfg, rt)
	})
	natsSrv := testkit.NewNATS(t)
	rec := &intakeEvents{evs: map[string][]*indexerv1.IntakePhaseEvent{}, seen: map[string]bool{}}
	nc, err := nats.Connect(natsSrv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe("am.evt.*.intake.>", func(m *nats.Msg) {
		var ev commonv1.Event
		var p indexerv1.IntakePhaseEvent
		if proto.Unmarshal(m.Data, &ev) != nil || ev.GetPayload().UnmarshalTo(&p) != nil {
			return
		}
		rec.mu.Lock()
		if !rec.seen[ev.GetId()] {
			rec.seen[ev.GetId()] = true
			rec.evs[p.GetDocumentId()] = append(rec.evs[p.GetDocumentId()], &p)
		}
		rec.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	uri, db := testkit.MongoURI(t)
	cfg := load(t, map[string]string{
		"MONGO_URI": uri, "MONGO_DATABASE": db, "NATS_URL": natsSrv.URL(), "INDEXER_DATA_DIR": t.TempDir(),
		"INDEXER_LLM_EXTRACTION": "false", "MODELGATEWAY_ADDR": gwAddr, "VISION_ADDR": visAddr,
		"INDEXER_QUALIFIER_TIMEOUT": "2s", "INDEXER_CHUNK_SIZE": "400", "INDEXER_CHUNK_OVERLAP": "80",
	}, env)
	addr := testkit.RunService(t, "indexer", func(ctx context.Context, rt service.Runtime) error {
		return indexer.Run(ctx, cfg, rt)
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &qualifierMesh{sim: sim, conn: conn, docs: indexerv1.NewDocumentServiceClient(conn), search: indexerv1.NewSearchServiceClient(conn),
		graph: indexerv1.NewGraphServiceClient(conn), events: rec, nats: natsSrv.URL()}
}

func qualifierFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "qualifier", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// intake is one document as a scenario sends it through the gateway: a
// multipart upload of files and fields, or, for what an upload cannot
// say (a text file attached beside the text), IngestDocument's JSON
// posted to /v1/documents.
type intake struct {
	upload []filePart
	ingest *indexerv1.IngestDocumentRequest
}

// uploadText is an upload of one text file named name, titled title,
// with more parts after it.
func uploadText(title, name, text string, more ...filePart) intake {
	parts := []filePart{{field: "title", data: []byte(title)}, {field: "file", file: name, data: []byte(text)}}
	return intake{upload: append(parts, more...)}
}

// finishedThroughGateway sends in through the REST gateway at url as the
// key of acme/intake, follows its intake over the WatchIntake SSE route
// until the stream ends with intake.finished, and returns the document
// the gateway's GET answers.
func finishedThroughGateway(t *testing.T, url string, in intake) *indexerv1.Document {
	t.Helper()
	var status int
	var raw []byte
	if in.upload != nil {
		body, ct := multipartBody(t, in.upload...)
		status, raw = gatewayCall(t, http.MethodPost, url+"/v1/documents:upload", "k-intake", bytes.NewReader(body), ct)
	} else {
		body, err := protojson.Marshal(in.ingest)
		if err != nil {
			t.Fatal(err)
		}
		status, raw = gatewayCall(t, http.MethodPost, url+"/v1/documents", "k-intake", bytes.NewReader(body), "application/json")
	}
	var ingested indexerv1.IngestDocumentResponse
	if err := protojson.Unmarshal(raw, &ingested); status != http.StatusOK || err != nil || ingested.GetDocument().GetId() == "" {
		t.Fatalf("ingest through the gateway: status %d, %v: %s", status, err, raw)
	}
	id := ingested.GetDocument().GetId()
	code, evs := watchIntake(t, url, "k-intake", id, "")
	if code != http.StatusOK || len(evs) == 0 || evs[len(evs)-1].name != "intake.finished" {
		t.Fatalf("intake watch of %s: status %d, %d events, want it to end with intake.finished", id, code, len(evs))
	}
	status, raw = gatewayCall(t, http.MethodGet, url+"/v1/documents/"+id, "k-intake", nil, "")
	var got indexerv1.GetDocumentResponse
	if err := protojson.Unmarshal(raw, &got); status != http.StatusOK || err != nil {
		t.Fatalf("GET the document through the gateway: status %d, %v: %s", status, err, raw)
	}
	if !got.GetDocument().GetPipeline().GetFinished() {
		t.Fatalf("the watch ended, the document's pipeline is not finished: %v", got.GetDocument().GetPipeline())
	}
	return got.GetDocument()
}

// phases returns the names of the pipeline's phases, and of those that
// ran (were not skipped).
func phases(p *indexerv1.IntakePipeline) (all, ran []string) {
	for _, ph := range p.GetPhases() {
		all = append(all, ph.GetName())
		if ph.GetSkipped() == "" {
			ran = append(ran, ph.GetName())
		}
	}
	return all, ran
}

var allPhases = []string{"vision_stage1", "content_type", "vision_stage2", "extraction", "indexing", "routing"}

// checkUnified checks what every intake must end with, whatever its
// type: all phases recorded, processed = chunks, every chunk PART_OF
// the base node (the document's node, carrying the base node key), the
// base info searchable as the base chunk, routing set, an intake event
// per phase and one at the end, and nothing an earlier phase found
// changed by a later one.
func (m *qualifierMesh) checkUnified(t *testing.T, doc *indexerv1.Document) {
	t.Helper()
	p := doc.GetPipeline()
	if all, _ := phases(p); !slices.Equal(all, allPhases) {
		t.Errorf("phases %v, want %v", all, allPhases)
	}
	ix := p.GetIndexing()
	if ix.GetChunkCount() != doc.GetChunkCount() || ix.GetProcessedCount() != ix.GetChunkCount() || len(ix.GetChunkIds()) != int(ix.GetChunkCount()) {
		t.Errorf("indexing: %d chunks, %d processed, %d ids; the document has %d", ix.GetChunkCount(), ix.GetProcessedCount(), len(ix.GetChunkIds()), doc.GetChunkCount())
	}
	if p.GetCorrelationId() != doc.GetExtractionJobId() || !strings.HasSuffix(ix.GetBaseNodeKey(), "_"+strings.ReplaceAll(p.GetCorrelationId(), "-", "_")) {
		t.Errorf("base node key %q, correlation id %q", ix.GetBaseNodeKey(), p.GetCorrelationId())
	}
	if p.GetOriginalText() == "" || p.GetSourceUrn() == "" || p.GetScope().GetTenantId() != doc.GetScope().GetTenantId() {
		t.Errorf("task metadata: urn %q, scope %v, %d bytes of text", p.GetSourceUrn(), p.GetScope(), len(p.GetOriginalText()))
	}
	ctx := context.Background()
	node, err := m.graph.GetNode(ctx, &indexerv1.GetNodeRequest{Scope: doc.GetScope(), Key: "doc:" + doc.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got := node.GetNode().GetProperties().GetFields()["base_node_key"].GetStringValue(); got != ix.GetBaseNodeKey() {
		t.Errorf("base node carries key %q, want %q", got, ix.GetBaseNodeKey())
	}
	nb, err := m.graph.ListNeighbors(ctx, &indexerv1.ListNeighborsRequest{Scope: doc.GetScope(), Key: "doc:" + doc.GetId(), EdgeTypes: []string{"PART_OF"}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var linked []string
	for _, e := range nb.GetEdges() {
		if e.GetType() == "PART_OF" && e.GetToKey() == "doc:"+doc.GetId() {
			linked = append(linked, strings.TrimPrefix(e.GetFromKey(), "chunk:"))
		}
	}
	slices.Sort(linked)
	if want := slices.Sorted(slices.Values(ix.GetChunkIds())); !slices.Equal(linked, want) {
		t.Errorf("PART_OF links from %v, want every chunk %v", linked, want)
	}
	if r := p.GetRouting(); r.GetRouting() == indexerv1.Routing_ROUTING_UNSPECIFIED || r.GetReason() == "" || r.GetRouting() != doc.GetRouting() {
		t.Errorf("routing %v, document %v", r, doc.GetRouting())
	}
	if (doc.GetRouting() == indexerv1.Routing_ROUTING_LIFT_UP) != (doc.GetLiftedJobId() != "" && p.GetRouting().GetLiftedJobId() == doc.GetLiftedJobId()) {
		t.Errorf("routing %v with lifted job %q (pipeline %q)", doc.GetRouting(), doc.GetLiftedJobId(), p.GetRouting().GetLiftedJobId())
	}
	// The events: one per phase and the end; the extraction phase's
	// snapshot holds what the ingest phases found, unchanged at the end.
	var names []string
	var atExtraction *indexerv1.IntakePipeline
	testkit.Eventually(t, 10*time.Second, func() bool {
		names = names[:0]
		for _, ev := range m.events.of(doc.GetId()) {
			names = append(names, ev.GetPhase().GetName())
			if ev.GetPhase().GetName() == "extraction" {
				atExtraction = ev.GetPipeline()
			}
		}
		return len(names) == len(allPhases)+1
	}, "an intake event per phase and one at the end")
	if want := append(slices.Clone(allPhases), "routing"); !slices.Equal(names, want) { // the end event names the last phase
		t.Errorf("intake events %v, want %v", names, want)
	}
	for name, pair := range map[string][2]proto.Message{
		"vision":       {atExtraction.GetVision(), p.GetVision()},
		"content type": {atExtraction.GetContentType(), p.GetContentType()},
		"extraction":   {atExtraction.GetExtraction(), p.GetExtraction()},
		"attachments":  {&indexerv1.IntakePipeline{Attachments: atExtraction.GetAttachments()}, &indexerv1.IntakePipeline{Attachments: p.GetAttachments()}},
	} {
		if !proto.Equal(pair[0], pair[1]) {
			t.Errorf("%s changed after its phase:\n at extraction %v\n at the end    %v", name, pair[0], pair[1])
		}
	}
}

// mentions returns the keys of the entities the document MENTIONS.
func (m *qualifierMesh) mentions(t *testing.T, doc *indexerv1.Document) []string {
	t.Helper()
	nb, err := m.graph.ListNeighbors(context.Background(), &indexerv1.ListNeighborsRequest{Scope: doc.GetScope(), Key: "doc:" + doc.GetId(), EdgeTypes: []string{"MENTIONS"}})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, n := range nb.GetNodes() {
		keys = append(keys, n.GetKey())
	}
	slices.Sort(keys)
	return keys
}

// TestQualifierScenarios runs the seed's scenarios through the real REST
// gateway and services: plain text, plain text with an image, an .eml
// with a PNG attached, a Jira-like ticket with a screenshot, a
// Confluence-like page, a log of 301 lines; and models that never call
// the routing tool, answer garbage, or never answer. Each is uploaded as
// a user would (multipart), followed over the intake watch's SSE to its
// end and read back with the gateway's GET; every pipeline finishes.
func TestQualifierScenarios(t *testing.T) {
	t.Parallel()
	const classify, summarise = "You classify one document", "You summarise application logs"
	m := startQualifierMesh(t, func(sim *providersim.Server) {
		// Vision: stage 2 asks for JSON of its kind's schema, stage 1 for text.
		sim.When(providersim.Match{JSON: true, WithImages: true, AnyMessageContains: "Extract the e-mail addresses"}).JSON(map[string]any{
			"sender": "Ana Nováková", "recipients": []string{"Payments On-call"}, "email_addresses": []string{"ana@example.com"}, "subject": "Re: Ledger timeouts"})
		sim.When(providersim.Match{JSON: true, WithImages: true, AnyMessageContains: "Extract the ticket key"}).JSON(map[string]any{
			"key": "PAY-412", "status": "In Review", "assignee": "Jan Novak", "title": "Configurable ledger pool"})
		sim.When(providersim.Match{WithImages: true}).Text("A Grafana panel: ledger p99 latency at 30 seconds.")
		// Content type, when the rules are unsure.
		sim.When(providersim.Match{SystemContains: classify, AnyMessageContains: "zebracorn"}).Text(`{"contentType": EMAIL`)
		sim.When(providersim.Match{SystemContains: classify, AnyMessageContains: "slowpoke"}).Hang()
		sim.When(providersim.Match{SystemContains: classify}).JSON(map[string]any{"contentType": "GENERIC", "reason": "notes, not a message, ticket, page or log"})
		// The log's summary.
		sim.When(providersim.Match{SystemContains: summarise}).JSON(map[string]any{
			"summary":         "The ledger timed out under load from 08:15 and the service shut down at 08:20.",
			"keyEvents":       []string{"08:15:07 first LEDGER_TIMEOUT", "08:16:03 connection pool exhausted", "08:20:00 FATAL ERR-5003, shutdown"},
			"criticalDetails": []string{"LEDGER_TIMEOUT after 30000 ms (6 times)", "ERR-5003 ledger unreachable"},
		})
		// Routing.
		sim.When(providersim.Match{Tools: []string{"route_task"}, AnyMessageContains: "slowpoke"}).Hang()
		sim.When(providersim.Match{Tools: []string{"route_task"}, AnyMessageContains: "notool"}).Text("Looks informational to me.")
		sim.When(providersim.Match{Tools: []string{"route_task"}, AnyMessageContains: "badargs"}).ToolCall("route_task", `{"decision": "MAYBE", "reason": "unsure"}`)
		sim.When(providersim.Match{Tools: []string{"route_task"}, AnyMessageContains: "PAY-412"}).
			ToolCall("route_task", map[string]any{"decision": "LIFT_UP", "reason": "a code change to make the pool configurable"})
		sim.When(providersim.Match{Tools: []string{"route_task"}}).ToolCall("route_task", map[string]any{"decision": "DONE", "reason": "informational"})
	})
	url := uploadGateway(t, m)
	sc := &commonv1.Scope{TenantId: "acme", ProjectId: "intake"} // the key's
	png := qualifierFixture(t, "panel.png")
	plain := "We meet in Brno in June. Bring walking shoes; the venue is a short hike from the station. Dinner is on the first evening."
	ticket := "Status: In Review\nIssue Type: Story\nPriority: Low\nAssignee: Jan Novak\nReporter: Ana Novakova\nEpic Link: PAY-100\nSprint: Payments 42\n\n" +
		"Description:\nMake the ledger pool size configurable; the screenshot shows p99 at the current size.\n"
	page := "Author: Jan Novak\nSpace: Payments Engineering\n\n# Ledger runbook\n\nThis page explains how to drain the ledger safely.\n\n" +
		"## Prerequisites\n\nAccess to the payments cluster.\n\n## Draining\n\nScale the writers to zero, then wait for the queue to empty.\n\n## Rollback\n\nScale back up.\n"

	type want struct {
		typ       indexerv1.IntakeContentType
		typeBy    indexerv1.DecidedBy
		ran       []string // phases that ran, not skipped
		chunks    int32    // 0: not checked
		routing   indexerv1.Routing
		routingBy indexerv1.DecidedBy
		errors    []string // substrings of phase errors, in phase order
		check     func(t *testing.T, doc *indexerv1.Document)
	}
	for _, tc := range []struct {
		name string
		in   intake
		want want
	}{{
		name: "plain text",
		in:   uploadText("Offsite", "offsite.txt", plain),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, chunks: 2,
			routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			check: func(t *testing.T, doc *indexerv1.Document) {
				if got := doc.GetPipeline().GetExtraction().GetGeneric().GetBaseInfo(); got != "Offsite: We meet in Brno in June." {
					t.Errorf("generic base info %q", got)
				}
			}},
	}, {
		name: "plain text with an image",
		// An upload makes every text file the text: a text file
		// attached beside it is IngestDocument's JSON.
		in: intake{ingest: &indexerv1.IngestDocumentRequest{SourceType: indexerv1.SourceType_SOURCE_TYPE_OTHER, Title: "Offsite venue", RawContent: plain + " The venue photo is attached.",
			Attachments: []*indexerv1.Attachment{{Name: "venue.png", MimeType: "image/png", Data: png}, {Name: "agenda.txt", MimeType: "text/plain", Data: []byte("day 1: hike")}}}},
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			ran: []string{"vision_stage1", "content_type", "extraction", "indexing", "routing"}, chunks: 3, // base, text, images
			routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			check: func(t *testing.T, doc *indexerv1.Document) {
				v, atts := doc.GetPipeline().GetVision(), doc.GetPipeline().GetAttachments()
				if v.GetGeneralSummary() == "" || v.GetTypeSpecificDetails() != "" {
					t.Errorf("vision %v: want stage 1 only", v)
				}
				if len(atts) != 2 || !atts[0].GetVisual() || atts[0].GetVisionAnalysis() == "" || atts[1].GetVisual() || atts[1].GetNote() == "" {
					t.Errorf("attachments %v: want the image analysed, the text file listed", atts)
				}
			}},
	}, {
		name: "e-mail with a PNG attached",
		in:   intake{upload: []filePart{{field: "title", data: []byte("Ledger timeouts")}, {field: "file", file: "incident.eml", data: qualifierFixture(t, "incident.eml")}}},
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL, typeBy: indexerv1.DecidedBy_DECIDED_BY_RULES,
			ran: allPhases, chunks: 3, // base, body, images
			routing: indexerv1.Routing_ROUTING_LIFT_UP, routingBy: indexerv1.DecidedBy_DECIDED_BY_RULES, // "could you"
			check: func(t *testing.T, doc *indexerv1.Document) {
				e := doc.GetPipeline().GetExtraction().GetEmail()
				if e.GetFrom() != "Ana Nováková <ana@example.com>" || len(e.GetTo()) != 2 || len(e.GetCc()) != 1 || e.GetThread() != "Ledger timeouts – 2.4" ||
					e.GetMessageId() != "msg-2@example.com" || e.GetDate() == nil || strings.Contains(e.GetBody(), "Rolled out") || strings.Contains(e.GetBody(), "Payments SRE") {
					t.Errorf("e-mail extraction %v", e)
				}
				if d := doc.GetPipeline().GetVision().GetTypeSpecificDetails(); !strings.Contains(d, "ana@example.com") {
					t.Errorf("vision stage 2 details %q", d)
				}
				if atts := doc.GetPipeline().GetAttachments(); len(atts) != 1 || atts[0].GetName() != "panel.png" || atts[0].GetMimeType() != "image/png" || !atts[0].GetVisual() {
					t.Errorf("attachments %v: want the PNG carried in the .eml", atts)
				}
				if got, want := m.mentions(t, doc), []string{"entity:person:ana_nováková", "entity:person:bob@example.com",
					"entity:person:cto@example.com", "entity:person:payments_on-call"}; !slices.Equal(got, want) {
					t.Errorf("mentions %v, want %v", got, want)
				}
				if !strings.HasPrefix(doc.GetPipeline().GetIndexing().GetBaseNodeKey(), "email_") || !strings.HasPrefix(doc.GetPipeline().GetIndexing().GetBaseInfo(), "Email from Ana") {
					t.Errorf("indexing %v", doc.GetPipeline().GetIndexing())
				}
			}},
	}, {
		name: "Jira ticket with a screenshot",
		in: uploadText("PAY-412: Configurable ledger pool", "PAY-412.txt", ticket,
			filePart{field: "source_type", data: []byte("ticket")}, filePart{field: "file", file: "p99.png", data: png, header: "image/png"}),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA, typeBy: indexerv1.DecidedBy_DECIDED_BY_RULES,
			ran: allPhases, routing: indexerv1.Routing_ROUTING_LIFT_UP, routingBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			check: func(t *testing.T, doc *indexerv1.Document) {
				j := doc.GetPipeline().GetExtraction().GetJira()
				if j.GetKey() != "PAY-412" || j.GetStatus() != "In Review" || j.GetType() != "Story" || j.GetAssignee() != "Jan Novak" ||
					j.GetReporter() != "Ana Novakova" || j.GetEpic() != "PAY-100" || j.GetSprint() != "Payments 42" || !strings.HasPrefix(j.GetChangeDescription(), "Make the ledger pool") {
					t.Errorf("Jira extraction %v", j)
				}
				if got, want := m.mentions(t, doc), []string{"entity:person:ana_novakova", "entity:person:jan_novak", "entity:ticket:pay-412"}; !slices.Equal(got, want) {
					t.Errorf("mentions %v, want %v", got, want)
				}
				if d := doc.GetPipeline().GetVision().GetTypeSpecificDetails(); !strings.Contains(d, "PAY-412") {
					t.Errorf("vision stage 2 details %q", d)
				}
			}},
	}, {
		name: "Confluence page",
		in:   uploadText("Ledger runbook", "runbook.md", page, filePart{field: "source_type", data: []byte("wiki")}),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE, typeBy: indexerv1.DecidedBy_DECIDED_BY_RULES,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			check: func(t *testing.T, doc *indexerv1.Document) {
				c := doc.GetPipeline().GetExtraction().GetConfluence()
				if c.GetAuthor() != "Jan Novak" || c.GetTitle() != "Ledger runbook" || c.GetTopic() != "Payments Engineering" ||
					!slices.Equal(c.GetHeadings(), []string{"Ledger runbook", "Prerequisites", "Draining", "Rollback"}) {
					t.Errorf("Confluence extraction %v", c)
				}
				if got := m.mentions(t, doc); !slices.Equal(got, []string{"entity:person:jan_novak"}) {
					t.Errorf("mentions %v, want the author", got)
				}
			}},
	}, {
		name: "application log",
		// No title and no source type: the file's name and, for .log
		// files, a log.
		in: intake{upload: []filePart{{field: "file", file: "ledger.log", data: qualifierFixture(t, "ledger.log")}}},
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_LOG, typeBy: indexerv1.DecidedBy_DECIDED_BY_RULES,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, chunks: 4, // base + summary, key events, critical details
			routing: indexerv1.Routing_ROUTING_LIFT_UP, routingBy: indexerv1.DecidedBy_DECIDED_BY_RULES, // error lines
			check: func(t *testing.T, doc *indexerv1.Document) {
				l := doc.GetPipeline().GetExtraction().GetLog()
				if l.GetSummarizedBy() != indexerv1.DecidedBy_DECIDED_BY_MODEL || len(l.GetKeyEvents()) != 3 || len(l.GetCriticalDetails()) != 2 ||
					l.GetLineCount() != 301 || l.GetLevelCounts()["ERROR"] != 6 || !slices.Equal(l.GetErrorCodes(), []string{"LEDGER_TIMEOUT", "ERR-5003"}) ||
					l.GetFirstTime() == nil || !l.GetLastTime().AsTime().Equal(time.Date(2024, 3, 12, 8, 20, 0, 0, time.UTC)) {
					t.Errorf("log extraction %v", l)
				}
			}},
	}, {
		name: "model never calls the routing tool",
		in:   uploadText("notool", "menu.txt", "Lunch menu notool: soup and bread on Friday."),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_FALLBACK,
			check: func(t *testing.T, doc *indexerv1.Document) {
				if w := doc.GetPipeline().GetRouting().GetWarning(); !strings.Contains(w, "did not call route_task") {
					t.Errorf("routing warning %q", w)
				}
			}},
	}, {
		name: "model calls the routing tool with a decision it does not offer",
		in:   uploadText("badargs", "parking.txt", "Parking badargs: the garage closes at nine."),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_FALLBACK,
			errors: []string{"routing model"}},
	}, {
		name: "model answers garbage",
		in:   uploadText("zebracorn", "sighting.txt", "The zebracorn sighting was near the river."),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_FALLBACK,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_MODEL,
			errors: []string{"content type model"}},
	}, {
		name: "model never answers",
		in:   uploadText("slowpoke", "report.txt", "The slowpoke report has no structure at all."),
		want: want{typ: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, typeBy: indexerv1.DecidedBy_DECIDED_BY_FALLBACK,
			ran: []string{"content_type", "extraction", "indexing", "routing"}, routing: indexerv1.Routing_ROUTING_DONE, routingBy: indexerv1.DecidedBy_DECIDED_BY_FALLBACK,
			errors: []string{"content type model", "routing model"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			doc := finishedThroughGateway(t, url, tc.in)
			if !proto.Equal(doc.GetScope(), sc) {
				t.Errorf("scope %v, want the key's %v", doc.GetScope(), sc)
			}
			p, w := doc.GetPipeline(), tc.want
			if ct := p.GetContentType(); ct.GetType() != w.typ || ct.GetDecidedBy() != w.typeBy || ct.GetReason() == "" {
				t.Errorf("content type %v, want %v by %v", ct, w.typ, w.typeBy)
			}
			if _, ran := phases(p); !slices.Equal(ran, w.ran) {
				t.Errorf("phases that ran %v, want %v", ran, w.ran)
			}
			// The vision phases count the tokens of the vision service's
			// model calls (the simulator reports usage on each).
			for _, ph := range p.GetPhases() {
				if strings.HasPrefix(ph.GetName(), "vision_stage") && ph.GetSkipped() == "" && len(ph.GetErrors()) == 0 && ph.GetTokens() <= 0 {
					t.Errorf("phase %s ran with %d tokens", ph.GetName(), ph.GetTokens())
				}
			}
			if w.chunks != 0 && doc.GetChunkCount() != w.chunks {
				t.Errorf("%d chunks, want %d", doc.GetChunkCount(), w.chunks)
			}
			if r := p.GetRouting(); r.GetRouting() != w.routing || r.GetDecidedBy() != w.routingBy {
				t.Errorf("routing %v, want %v by %v", r, w.routing, w.routingBy)
			}
			var errs []string
			for _, ph := range p.GetPhases() {
				errs = append(errs, ph.GetErrors()...)
			}
			if len(errs) != len(w.errors) {
				t.Errorf("phase errors %q, want %d", errs, len(w.errors))
			}
			for i := range min(len(errs), len(w.errors)) {
				if !strings.Contains(errs[i], w.errors[i]) {
					t.Errorf("phase error %q, want it about %q", errs[i], w.errors[i])
				}
			}
			m.checkUnified(t, doc)
			if w.check != nil {
				w.check(t, doc)
			}
		})
	}
}
