package indexer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentmesh/agentmesh/gateway/httpgateway"
	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pdftest"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// filePart is one part of a multipart upload: a file when file is set,
// else a field. header, when set, is the part's Content-Type (which the
// gateway must not trust).
type filePart struct {
	field, file string
	data        []byte
	header      string
	disposition string // the part's Content-Disposition as written, when set
}

// multipartBody encodes parts as multipart/form-data.
func multipartBody(t *testing.T, parts ...filePart) (body []byte, contentType string) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p.file != "" || p.disposition != "" {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.field, p.file))
			if p.disposition != "" {
				h.Set("Content-Disposition", p.disposition)
			}
			ct := p.header
			if ct == "" {
				ct = "application/octet-stream"
			}
			h.Set("Content-Type", ct)
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.field))
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), mw.FormDataContentType()
}

// uploadGateway is the real HTTP gateway in front of the mesh's indexer,
// with API keys (the upload must keep the API's tenancy) and small upload
// limits.
func uploadGateway(t *testing.T, m *qualifierMesh) string {
	t.Helper()
	// The other services are not needed: an address nobody serves.
	nobody, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nobody.Close() })
	h, err := httpgateway.Handler(&httpgateway.Config{
		APIKeys:        "k-intake=acme:intake,k-other=globex,k-acme=acme",
		UploadMaxBytes: 256 << 10, UploadMaxFileBytes: 96 << 10,
	}, httpgateway.Backends{Model: nobody, Orchestrator: nobody, Vision: nobody, Indexer: m.conn, Classifier: nobody, SQLAgent: nobody}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// upload posts body to the upload route with key and returns the status
// and the decoded JSON answer.
func upload(t *testing.T, url, key string, body []byte, contentType string) (int, map[string]any) {
	t.Helper()
	return uploadFrom(t, url, key, bytes.NewReader(body), contentType)
}

// uploadFrom is upload of a body read from r: of unknown length, sent
// chunked, unless r is a bytes.Reader.
func uploadFrom(t *testing.T, url, key string, r io.Reader, contentType string) (int, map[string]any) {
	t.Helper()
	status, raw := gatewayCall(t, http.MethodPost, url+"/v1/documents:upload", key, r, contentType)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("status %d, not JSON: %s", status, raw)
	}
	return status, out
}

// gatewayCall sends a request with body r (none when nil) to the gateway
// with key (none when empty) and returns the status and the answer's
// bytes.
func gatewayCall(t *testing.T, method, url, key string, r io.Reader, contentType string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// TestUploadThroughTheGateway sends multipart uploads through the real
// gateway to the real indexer, vision service and model gateway (the
// provider a simulator): a PDF of 5 pages has its first 3 pages seen by
// vision and its whole text layer searchable; an .eml with a PNG is the
// e-mail its parser reads; text with a screenshot; a corrupt PDF is kept
// with its error recorded. Every refused upload stores nothing.
func TestUploadThroughTheGateway(t *testing.T) {
	t.Parallel()
	pdftest.RequireTools(t)
	m := startQualifierMesh(t, func(sim *providersim.Server) {
		for page := 1; page <= 5; page++ {
			sim.When(providersim.Match{WithImages: true, LastUserContains: fmt.Sprintf("review.pdf#page=%d", page)}).
				Named(fmt.Sprintf("pdf page %d", page)).Text(fmt.Sprintf("Rendered page %d: a table of ledger balances.", page))
		}
		sim.When(providersim.Match{JSON: true, WithImages: true}).JSON(map[string]any{"sender": "Ana Nováková"})
		sim.When(providersim.Match{WithImages: true}).Named("other image").Text("A Grafana panel: ledger p99 latency at 30 seconds.")
		sim.When(providersim.Match{SystemContains: "You classify one document"}).
			JSON(map[string]any{"contentType": "GENERIC", "reason": "a report, not a message, ticket, page or log"})
		sim.When(providersim.Match{Tools: []string{"route_task"}}).ToolCall("route_task", map[string]any{"decision": "DONE", "reason": "informational"})
	})
	url := uploadGateway(t, m)
	ctx := context.Background()
	intakeScope := &commonv1.Scope{TenantId: "acme", ProjectId: "intake"}

	finished := func(t *testing.T, id string) *indexerv1.Document {
		t.Helper()
		var doc *indexerv1.Document
		testkit.Eventually(t, 30*time.Second, func() bool {
			r, err := m.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: intakeScope, DocumentId: id})
			doc = r.GetDocument()
			return err == nil && doc.GetPipeline().GetFinished()
		}, "the pipeline of "+id+" finished")
		return doc
	}
	ingested := func(t *testing.T, status int, res map[string]any) string {
		t.Helper()
		doc, _ := res["document"].(map[string]any)
		id, _ := doc["id"].(string)
		if status != http.StatusOK || id == "" {
			t.Fatalf("status %d: %v", status, res)
		}
		return id
	}

	t.Run("the project a file goes to", func(t *testing.T) {
		send := func(key, text string) (int, map[string]any) {
			body, ct := multipartBody(t, filePart{field: "project_id", data: []byte("reports")},
				filePart{field: "file", file: "note.txt", data: []byte(text)})
			return upload(t, url, key, body, ct)
		}
		// A tenant-wide key names any project of its tenant.
		status, res := send("k-acme", "The reports project keeps the quarter's notes.")
		id := ingested(t, status, res)
		got, err := m.docs.GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: &commonv1.Scope{TenantId: "acme", ProjectId: "reports"}, DocumentId: id})
		if err != nil || got.GetDocument().GetScope().GetProjectId() != "reports" {
			t.Errorf("a tenant-wide key's upload to project reports: %v, %v", got.GetDocument().GetScope(), err)
		}
		// A key bound to project intake names no other.
		status, res = send("k-intake", "Another project's note.")
		if msg, _ := res["message"].(string); status != http.StatusBadRequest || !strings.Contains(msg, "project") {
			t.Errorf("a project's key naming another project: status %d, %v; want 400 naming the project", status, res)
		}
		body, ct := multipartBody(t, filePart{field: "project_id", data: []byte("bad.project")}, filePart{field: "file", file: "n.txt", data: []byte("x")})
		if status, res := upload(t, url, "k-acme", body, ct); status != http.StatusBadRequest || res["message"] == nil ||
			!strings.Contains(res["message"].(string), "project_id") {
			t.Errorf("a malformed project_id: status %d, %v; want 400 naming project_id", status, res)
		}
	})

	t.Run("a PDF of 5 pages", func(t *testing.T) {
		var pages []string
		for i, w := range []string{"aardvark", "bergamot", "cinnabar", "dulcimer", "escarpment"} {
			pages = append(pages, fmt.Sprintf("Quarterly ledger review, page %d\nKeyword %s", i+1, w))
		}
		body, ct := multipartBody(t, filePart{field: "title", data: []byte("Q3 ledger review")},
			filePart{field: "source_urn", data: []byte("urn:acme:reports:q3")},
			filePart{field: "file", file: "review.pdf", data: pdftest.PDF(pages...), header: "text/plain"})
		status, res := upload(t, url, "k-intake", body, ct)
		doc := finished(t, ingested(t, status, res))
		if doc.GetTitle() != "Q3 ledger review" || doc.GetSourceUrl() != "urn:acme:reports:q3" || doc.GetScope().GetProjectId() != "intake" {
			t.Errorf("title %q, source %q, scope %v", doc.GetTitle(), doc.GetSourceUrl(), doc.GetScope())
		}
		// Vision saw pages 1 to 3, once each, as PNG images.
		var seen []string
		for _, r := range m.sim.ChatRequests() {
			if !strings.HasPrefix(r.Rule, "pdf page ") {
				continue
			}
			seen = append(seen, r.Rule)
			imgs := 0
			for _, msg := range r.Messages {
				for _, img := range msg.Images {
					imgs++
					if !strings.HasPrefix(img, "data:image/png;base64,") {
						t.Errorf("%s: image %.40s…, want a PNG data URI", r.Rule, img)
					}
				}
			}
			if imgs != 1 {
				t.Errorf("%s: %d images in the request, want 1", r.Rule, imgs)
			}
		}
		slices.Sort(seen)
		if want := []string{"pdf page 1", "pdf page 2", "pdf page 3"}; !slices.Equal(seen, want) {
			t.Errorf("vision stage 1 calls %v, want %v", seen, want)
		}
		p := doc.GetPipeline()
		if len(p.GetAttachments()) != 1 {
			t.Fatalf("attachments %v", p.GetAttachments())
		}
		a := p.GetAttachments()[0]
		if a.GetName() != "review.pdf" || a.GetMimeType() != "application/pdf" || !a.GetVisual() ||
			!strings.HasPrefix(a.GetNote(), "PDF of 5 pages: text layer read") || !strings.Contains(a.GetNote(), "pages 1-3 rendered for vision") {
			t.Errorf("attachment %v", a)
		}
		for page := 1; page <= 3; page++ {
			if !strings.Contains(a.GetVisionAnalysis(), fmt.Sprintf("page %d: Rendered page %d", page, page)) {
				t.Errorf("the PDF's vision analysis lacks page %d: %q", page, a.GetVisionAnalysis())
			}
		}
		if p.GetVision().GetGeneralSummary() == "" || len(pipeline.Errors(p)) != 0 {
			t.Errorf("vision %v, errors %v", p.GetVision(), pipeline.Errors(p))
		}
		// The text layer of every page is indexed, the pages vision never
		// saw included.
		for _, word := range []string{"bergamot", "escarpment"} {
			testkit.Eventually(t, 20*time.Second, func() bool {
				hits, err := m.search.Search(ctx, &indexerv1.SearchRequest{Scope: intakeScope, Query: word, Mode: indexerv1.SearchMode_SEARCH_MODE_KEYWORD})
				return err == nil && len(hits.GetHits()) > 0 && hits.GetHits()[0].GetDocumentId() == doc.GetId() &&
					strings.Contains(hits.GetHits()[0].GetText(), word)
			}, "a search hit for "+word+" in the PDF's text layer")
		}
	})

	t.Run("an .eml with a PNG attached, and a screenshot beside it", func(t *testing.T) {
		body, ct := multipartBody(t, filePart{field: "file", file: "incident.eml", data: qualifierFixture(t, "incident.eml")},
			filePart{field: "file", file: "extra.png", data: testkit.PNG(t, 9), header: "application/octet-stream"})
		status, res := upload(t, url, "k-intake", body, ct)
		doc := finished(t, ingested(t, status, res))
		p := doc.GetPipeline()
		if doc.GetSourceType() != indexerv1.SourceType_SOURCE_TYPE_EMAIL || p.GetContentType().GetType() != indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL {
			t.Errorf("source type %v, content type %v", doc.GetSourceType(), p.GetContentType())
		}
		if e := p.GetExtraction().GetEmail(); e.GetFrom() != "Ana Nováková <ana@example.com>" || e.GetMessageId() != "msg-2@example.com" {
			t.Errorf("e-mail extraction %v", e)
		}
		var names []string
		for _, a := range p.GetAttachments() {
			names = append(names, a.GetName())
		}
		// The uploaded screenshot, then the PNG the message carries.
		if len(names) != 2 || names[0] != "extra.png" {
			t.Errorf("attachments %v", names)
		}
	})

	t.Run("text with a screenshot", func(t *testing.T) {
		body, ct := multipartBody(t, filePart{field: "file", file: "notes.md", data: []byte("# Ledger notes\n\nThe ledger p99 went up after the deploy; the panel shows it.\n")},
			filePart{field: "file", file: "panel.png", data: qualifierFixture(t, "panel.png"), header: "image/jpeg"},
			filePart{field: "source_type", data: []byte("wiki")})
		status, res := upload(t, url, "k-intake", body, ct)
		doc := finished(t, ingested(t, status, res))
		if doc.GetTitle() != "notes.md" || doc.GetSourceType() != indexerv1.SourceType_SOURCE_TYPE_WIKI ||
			!strings.HasPrefix(doc.GetRawContent(), "# Ledger notes") || !strings.Contains(doc.GetRawContent(), "- panel.png (image/png, ") {
			t.Errorf("title %q, source type %v, content %q", doc.GetTitle(), doc.GetSourceType(), doc.GetRawContent())
		}
		a := doc.GetPipeline().GetAttachments()
		if len(a) != 1 || !a[0].GetVisual() || a[0].GetDeclaredMimeType() != "image/png" || a[0].GetVisionAnalysis() == "" {
			t.Errorf("attachments %v", a)
		}
	})

	t.Run("a corrupt PDF is kept with its error recorded", func(t *testing.T) {
		body, ct := multipartBody(t, filePart{field: "file", file: "broken.pdf", data: []byte("%PDF-1.7\n1 0 obj << /Type /Catalog garbage")})
		status, res := upload(t, url, "k-intake", body, ct)
		doc := finished(t, ingested(t, status, res))
		p := doc.GetPipeline()
		a := p.GetAttachments()
		if len(a) != 1 || a[0].GetVisual() || !strings.HasPrefix(a[0].GetNote(), "PDF kept and listed, unreadable: pdftotext: cannot open the PDF") {
			t.Errorf("attachments %v", a)
		}
		if errs := pipeline.Errors(p); len(errs) != 1 || !strings.HasPrefix(errs[0], "vision_stage1: broken.pdf: pdftotext: cannot open the PDF") {
			t.Errorf("errors %v", errs)
		}
		if p.GetRouting().GetRouting() == indexerv1.Routing_ROUTING_UNSPECIFIED {
			t.Errorf("routing not set: %v", p.GetRouting())
		}
	})

	t.Run("refused uploads store nothing", func(t *testing.T) {
		// Tenant globex stores nothing but through these requests.
		globex := &commonv1.Scope{TenantId: "globex"}
		good := filePart{field: "file", file: "ok.txt", data: []byte("A perfectly fine note about the ledger.")}
		big := bytes.Repeat([]byte("ledger line\n"), (96<<10)/12+1)
		mid := bytes.Repeat([]byte("ledger line\n"), (80<<10)/12)
		brokenEML := []byte("From: ana@example.com\nTo: ops@example.com\nContent-Type: multipart/mixed; boundary=b1\n\nno part starts here\n")
		for _, tc := range []struct {
			name   string
			key    string
			parts  []filePart
			raw    string // a body that is not multipart, when parts is nil
			status int
			want   string
		}{
			{"no API key", "", []filePart{good}, "", http.StatusUnauthorized, "missing API key"},
			{"empty body", "k-other", nil, "", http.StatusBadRequest, "file: is required: send multipart/form-data"},
			{"JSON instead of multipart", "k-other", nil, `{"rawContent":"x"}`, http.StatusBadRequest, "file: is required: send multipart/form-data"},
			{"fields and no file", "k-other", []filePart{{field: "title", data: []byte("t")}}, "", http.StatusBadRequest, `file: is required: the upload has no part named "file"`},
			{"an empty file", "k-other", []filePart{good, {field: "file", file: "empty.txt"}}, "", http.StatusBadRequest, `file: "empty.txt" is empty`},
			{"a zip declared as PNG", "k-other", []filePart{good, {field: "file", file: "shot.png", data: []byte("PK\x03\x04\x14\x00\x00\x00\x08\x00zipzip"), header: "image/png"}}, "",
				http.StatusBadRequest, `file: "shot.png" is application/zip (judged by its bytes)`},
			{"an executable", "k-other", []filePart{{field: "file", file: "tool", data: []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00")}, good}, "",
				http.StatusBadRequest, `file: "tool" is application/octet-stream (judged by its bytes)`},
			{"an image that is not one", "k-other", []filePart{good, {field: "file", file: "shot.png", data: []byte("<html><body>not a picture</body></html>"), header: "image/png"}}, "",
				http.StatusBadRequest, `file: "shot.png" is named as an image but its bytes are text/html`},
			{"a PDF that is not one", "k-other", []filePart{good, {field: "file", file: "report.pdf", data: []byte("just text"), header: "application/pdf"}}, "",
				http.StatusBadRequest, `file: "report.pdf" is named as a PDF but its bytes are text/plain`},
			{"text that is not UTF-8", "k-other", []filePart{{field: "file", file: "latin1.txt", data: []byte("caf\xe9 au lait")}}, "",
				http.StatusBadRequest, `file: "latin1.txt" is not UTF-8 text`},
			{"a broken .eml", "k-other", []filePart{{field: "file", file: "broken.eml", data: brokenEML}}, "",
				http.StatusBadRequest, `file "broken.eml": raw_content: is not a well-formed e-mail`},
			{"two e-mails", "k-other", []filePart{{field: "file", file: "a.eml", data: qualifierFixture(t, "incident.eml")}, {field: "file", file: "b.eml", data: qualifierFixture(t, "incident.eml")}}, "",
				http.StatusBadRequest, `file: "b.eml": an .eml is a whole document`},
			{"a file over the per-file limit", "k-other", []filePart{good, {field: "file", file: "big.log", data: big}}, "",
				http.StatusRequestEntityTooLarge, `file: "big.log" is larger than 98304 bytes, the limit per file`},
			{"files over the upload's limit", "k-other", []filePart{good, {field: "file", file: "a.log", data: mid}, {field: "file", file: "b.log", data: mid},
				{field: "file", file: "c.log", data: mid}, {field: "file", file: "d.log", data: mid}}, "",
				http.StatusRequestEntityTooLarge, `file: "d.log" takes the upload's files past 262144 bytes`},
			{"a body past the upload's limit, refused by its length", "k-other", []filePart{good, {field: "file", file: "huge.txt", data: bytes.Repeat([]byte("x"), 1400<<10)}}, "",
				http.StatusRequestEntityTooLarge, "file: the upload is 1434"},
			{"an unknown field", "k-other", []filePart{good, {field: "colour", data: []byte("red")}}, "", http.StatusBadRequest, "colour: is not a field of an upload"},
			{"a file under another name", "k-other", []filePart{{field: "attachment", file: "ok.txt", data: []byte("x")}}, "", http.StatusBadRequest, `attachment: is a file part`},
			{"a file part without a part name", "k-other", []filePart{{field: "", file: "ok.txt", data: []byte("x")}}, "", http.StatusBadRequest,
				`file: part 1 is a file without a part name: files go in parts named "file"`},
			{"a file name too long", "k-other", []filePart{{field: "file", file: strings.Repeat("a", 300) + ".txt", data: []byte("x")}}, "", http.StatusBadRequest,
				"file: part 1's file name is 304 bytes; at most 256"},
			// RFC 2231's filename* decodes what filename="..." may not hold.
			{"a control character in a file name", "k-other", []filePart{good, {disposition: `form-data; name="file"; filename*=UTF-8''a%01b%1b%5b31mRED%0d.txt`, data: []byte("x")}}, "",
				http.StatusBadRequest, "file: part 2's file name holds U+0001, a control or bidirectional formatting character, at byte 1"},
			{"a bidirectional override in a file name", "k-other", []filePart{{disposition: `form-data; name="file"; filename*=UTF-8''invoice%E2%80%AEgnp.exe.txt`, data: []byte("x")}}, "",
				http.StatusBadRequest, "file: part 1's file name holds U+202E, a control or bidirectional formatting character, at byte 7"},
			{"an unknown source type", "k-other", []filePart{good, {field: "source_type", data: []byte("fax")}}, "", http.StatusBadRequest, `source_type: "fax" is not one of`},
			{"a source that is not a URL", "k-other", []filePart{good, {field: "source_urn", data: []byte("not a url")}}, "", http.StatusBadRequest, "source_urn: must be an absolute URL or URN"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var body []byte
				ct := ""
				switch {
				case tc.parts != nil:
					body, ct = multipartBody(t, tc.parts...)
				case tc.raw != "":
					body, ct = []byte(tc.raw), "application/json"
				}
				status, res := upload(t, url, tc.key, body, ct)
				msg, _ := res["message"].(string)
				if status != tc.status || !strings.Contains(msg, tc.want) {
					t.Errorf("status %d, message %q; want %d and %q", status, msg, tc.status, tc.want)
				}
			})
		}
		t.Run("a body past the upload's limit, sent without a length", func(t *testing.T) {
			// The files stay within their limits; a preamble before the
			// first boundary (RFC 2046 §5.1.1: ignored) makes the body big.
			body, ct := multipartBody(t, good)
			preamble := bytes.Repeat([]byte("ignore me\r\n"), (1400<<10)/11)
			status, res := uploadFrom(t, url, "k-other", io.MultiReader(bytes.NewReader(preamble), bytes.NewReader(body)), ct)
			if msg, _ := res["message"].(string); status != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "file: the request body takes the upload past 262144 bytes") {
				t.Errorf("status %d, message %q", status, msg)
			}
		})
		list, err := m.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: globex})
		if err != nil || len(list.GetDocuments()) != 0 {
			t.Errorf("tenant globex holds %d documents (%v), want none", len(list.GetDocuments()), err)
		}
		// The same file, accepted, is stored in the key's tenant.
		body, ct := multipartBody(t, good)
		status, res := upload(t, url, "k-other", body, ct)
		ingested(t, status, res)
		list, err = m.docs.ListDocuments(ctx, &indexerv1.ListDocumentsRequest{Scope: globex})
		if err != nil || len(list.GetDocuments()) != 1 {
			t.Errorf("tenant globex holds %d documents (%v), want 1", len(list.GetDocuments()), err)
		}
	})
}
