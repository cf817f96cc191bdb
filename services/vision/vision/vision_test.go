package vision_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	"image/png"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/agentmesh/agentmesh/libs/config"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/service"
	"github.com/agentmesh/agentmesh/libs/testkit"
	"github.com/agentmesh/agentmesh/libs/testkit/providersim"
	"github.com/agentmesh/agentmesh/services/vision/vision"
)

// userTurn returns the last user message of a recorded request.
func userTurn(t *testing.T, r providersim.Request) providersim.Message {
	t.Helper()
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i]
		}
	}
	t.Fatalf("request %d has no user message", r.Seq)
	return providersim.Message{}
}

func TestStageOneDescribesEachImageAndSummarises(t *testing.T) {
	t.Parallel()
	m := startMesh(t, providersim.Qwen, nil)
	m.sim.When(providersim.Match{WithImages: true, LastUserContains: "dashboard.png"}).Text("A Grafana dashboard; the error rate panel spikes to 12%.")
	m.sim.When(providersim.Match{WithImages: true, LastUserContains: "login.png"}).Text("A login form showing 'Invalid token'.")

	resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
		Scope: scope(),
		Images: []*visionv1.Image{
			{Name: "dashboard.png", Data: pngImage(t, 1), MimeType: "image/png"},
			{Name: "login.png", Data: pngImage(t, 2), MimeType: "image/png"},
		},
		ContextText: "Users report login failures since the 10:00 deploy.",
		ContentType: visionv1.ContentType_CONTENT_TYPE_GENERIC,
	})
	if err != nil {
		t.Fatalf("AnalyzeImages: %v", err)
	}
	if got := resp.GetImages()[0].GetGeneralDescription(); got != "A Grafana dashboard; the error rate panel spikes to 12%." {
		t.Errorf("dashboard description = %q", got)
	}
	if got := resp.GetImages()[1].GetGeneralDescription(); got != "A login form showing 'Invalid token'." {
		t.Errorf("login description = %q", got)
	}
	wantSummary := "dashboard.png: A Grafana dashboard; the error rate panel spikes to 12%.\nlogin.png: A login form showing 'Invalid token'."
	if resp.GetGeneralSummary() != wantSummary {
		t.Errorf("general summary = %q, want %q", resp.GetGeneralSummary(), wantSummary)
	}
	if resp.GetModel() != "vision" {
		t.Errorf("model = %q, want the logical model vision", resp.GetModel())
	}
	for _, img := range resp.GetImages() {
		if img.GetTypeSpecificDetails() != "" || img.GetSkippedReason() != "" {
			t.Errorf("image %s: details %q skipped %q, want neither for GENERIC", img.GetName(), img.GetTypeSpecificDetails(), img.GetSkippedReason())
		}
	}
	if resp.GetTypeSpecificDetails() != "" {
		t.Errorf("type-specific details = %q, want none for GENERIC", resp.GetTypeSpecificDetails())
	}

	reqs := m.sim.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("provider got %d chat requests, want one stage 1 call per image", len(reqs))
	}
	for _, r := range reqs {
		u := userTurn(t, r)
		if r.JSONMode != "" {
			t.Errorf("stage 1 request asked for JSON (%s)", r.JSONMode)
		}
		if len(u.Images) != 1 {
			t.Errorf("stage 1 request carries %d images, want 1", len(u.Images))
		}
		if !strings.Contains(u.Content, "login failures since the 10:00 deploy") {
			t.Errorf("stage 1 prompt lacks the document context: %q", u.Content)
		}
	}
}

func TestImagesReachTheProviderInItsWireFormat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		flavor providersim.Flavor
		path   string
		want   func(b64 string) string
	}{
		{"qwen data URI in image_url part", providersim.Qwen, "/chat/completions", func(b64 string) string { return "data:image/png;base64," + b64 }},
		{"ollama base64 in images", providersim.Ollama, "/api/chat", func(b64 string) string { return b64 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := startMesh(t, tc.flavor, nil)
			m.sim.When(providersim.Match{WithImages: true}).Text("A photo of a server rack.")
			data := pngImage(t, 7) // declared as JPEG: the type of the bytes travels
			resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
				Scope:  scope(),
				Images: []*visionv1.Image{{Name: "rack.jpg", Data: data, MimeType: "Image/JPEG; q=0.9"}},
			})
			if err != nil {
				t.Fatalf("AnalyzeImages: %v", err)
			}
			if resp.GetGeneralSummary() != "A photo of a server rack." || resp.GetImages()[0].GetGeneralDescription() != "A photo of a server rack." {
				t.Errorf("summary %q description %q, want the model's description for one image",
					resp.GetGeneralSummary(), resp.GetImages()[0].GetGeneralDescription())
			}
			reqs := m.sim.ChatRequests()
			if len(reqs) != 1 {
				t.Fatalf("provider got %d chat requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Path != tc.path || r.Model != simModel {
				t.Errorf("request went to %s for model %q, want %s for %q", r.Path, r.Model, tc.path, simModel)
			}
			want := tc.want(base64.StdEncoding.EncodeToString(data))
			if u := userTurn(t, r); !slices.Equal(u.Images, []string{want}) {
				t.Errorf("images on the wire = %.80q, want [%.80q]", u.Images, want)
			}
		})
	}
}

func TestStageTwoExtractsTypeSpecificDetails(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		flavor providersim.Flavor
		ct     visionv1.ContentType
		answer map[string]any
		fields []string
		want   string
	}{
		{
			name: "email", flavor: providersim.Qwen, ct: visionv1.ContentType_CONTENT_TYPE_EMAIL,
			answer: map[string]any{"sender": "Alice Smith", "recipients": []string{"Bob Jones", "Carol White"},
				"email_addresses": []string{"alice@example.com", "bob@example.com"}, "subject": "Outage report"},
			fields: []string{"sender", "recipients", "email_addresses"},
			want:   "Sender: Alice Smith\nRecipients:\n- Bob Jones\n- Carol White\nE-mail addresses:\n- alice@example.com\n- bob@example.com\nSubject: Outage report",
		},
		{
			name: "ticket", flavor: providersim.Ollama, ct: visionv1.ContentType_CONTENT_TYPE_TICKET,
			answer: map[string]any{"key": "SDB-2080", "status": "In Progress", "assignee": "Jan Novak", "title": ""},
			fields: []string{"key", "status", "assignee"},
			want:   "Ticket key: SDB-2080\nStatus: In Progress\nAssignee: Jan Novak",
		},
		{
			name: "wiki", flavor: providersim.OpenAI, ct: visionv1.ContentType_CONTENT_TYPE_WIKI,
			answer: map[string]any{"page_title": "Runbook: DB failover", "author": "Dana Lee", "headings": []string{"Overview", "Steps"}},
			fields: []string{"page_title", "author", "headings"},
			want:   "Page title: Runbook: DB failover\nAuthor: Dana Lee\nHeadings:\n- Overview\n- Steps",
		},
		{
			name: "log", flavor: providersim.Qwen, ct: visionv1.ContentType_CONTENT_TYPE_LOG,
			answer: map[string]any{"error_codes": []string{"ERR_CONN_RESET"}, "timestamps": []string{"2024-05-01T10:00:00Z"},
				"stack_trace_snippets": []string{"at db.Connect(db.go:42)\nat main.main(main.go:9)"}},
			fields: []string{"error_codes", "timestamps", "stack_trace_snippets"},
			want:   "Error codes:\n- ERR_CONN_RESET\nTimestamps:\n- 2024-05-01T10:00:00Z\nStack trace snippets:\n- at db.Connect(db.go:42)\n  at main.main(main.go:9)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := startMesh(t, tc.flavor, nil)
			stage2 := m.sim.When(providersim.Match{JSON: true, WithImages: true}).JSON(tc.answer)
			stage1 := m.sim.When(providersim.Match{WithImages: true}).Text("Screenshot of the " + tc.name + " in question.")

			resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
				Scope:       scope(),
				Images:      []*visionv1.Image{{Name: "shot.png", Data: pngImage(t, 3), MimeType: "image/png"}},
				ContentType: tc.ct,
			})
			if err != nil {
				t.Fatalf("AnalyzeImages: %v", err)
			}
			if stage1.Hits() != 1 || stage2.Hits() != 1 {
				t.Fatalf("stage 1 calls %d, stage 2 calls %d, want 1 each", stage1.Hits(), stage2.Hits())
			}
			img := resp.GetImages()[0]
			if img.GetGeneralDescription() != "Screenshot of the "+tc.name+" in question." {
				t.Errorf("general description = %q", img.GetGeneralDescription())
			}
			if img.GetTypeSpecificDetails() != tc.want {
				t.Errorf("image details =\n%s\nwant\n%s", img.GetTypeSpecificDetails(), tc.want)
			}
			if resp.GetTypeSpecificDetails() != tc.want {
				t.Errorf("overall details =\n%s\nwant\n%s", resp.GetTypeSpecificDetails(), tc.want)
			}

			var r providersim.Request
			for _, cr := range m.sim.ChatRequests() {
				if cr.JSONMode != "" {
					r = cr
				}
			}
			u := userTurn(t, r)
			if len(u.Images) != 1 {
				t.Errorf("stage 2 request carries %d images, want 1", len(u.Images))
			}
			if !strings.Contains(u.Content, "Screenshot of the "+tc.name+" in question.") {
				t.Errorf("stage 2 prompt lacks the stage 1 description: %q", u.Content)
			}
			// The schema travels natively where the provider has a native
			// mode, else in the prompt; either way it names every field.
			schemaText := r.AllText()
			if r.Schema != nil {
				req, _ := r.Schema["required"].([]any)
				for _, f := range tc.fields {
					if !slices.Contains(req, any(f)) {
						t.Errorf("native schema does not require %q: %v", f, r.Schema)
					}
				}
			} else {
				for _, f := range tc.fields {
					if !strings.Contains(schemaText, `"`+f+`"`) {
						t.Errorf("schema in prompt lacks %q", f)
					}
				}
			}
		})
	}
}

func TestStageTwoMergesDetailsOverImages(t *testing.T) {
	t.Parallel()
	m := startMesh(t, providersim.Ollama, nil)
	m.sim.When(providersim.Match{JSON: true, LastUserContains: "board.png"}).
		JSON(map[string]any{"key": "SDB-2080", "status": "In Progress", "assignee": "Jan Novak", "title": "Login fails"})
	m.sim.When(providersim.Match{JSON: true, LastUserContains: "detail.png"}).
		JSON(map[string]any{"key": "SDB-2080", "status": "Blocked", "assignee": "", "title": ""})
	m.sim.When(providersim.Match{LastUserContains: "board.png"}).Text("A Jira board with SDB-2080 in the In Progress column.")
	m.sim.When(providersim.Match{LastUserContains: "detail.png"}).Text("The detail view of SDB-2080.")

	resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
		Scope: scope(),
		Images: []*visionv1.Image{
			{Name: "board.png", Data: pngImage(t, 4), MimeType: "image/png"},
			{Name: "detail.png", Data: pngImage(t, 5), MimeType: "image/png"},
		},
		ContentType: visionv1.ContentType_CONTENT_TYPE_TICKET,
	})
	if err != nil {
		t.Fatalf("AnalyzeImages: %v", err)
	}
	if got, want := resp.GetImages()[1].GetTypeSpecificDetails(), "Ticket key: SDB-2080\nStatus: Blocked"; got != want {
		t.Errorf("detail.png details = %q, want %q", got, want)
	}
	want := "Ticket key: SDB-2080\nStatus:\n- In Progress\n- Blocked\nAssignee: Jan Novak\nTitle: Login fails"
	if resp.GetTypeSpecificDetails() != want {
		t.Errorf("overall details =\n%s\nwant\n%s", resp.GetTypeSpecificDetails(), want)
	}
	if m.sim.Count() != 4 {
		t.Errorf("provider got %d chat requests, want 2 stages x 2 images", m.sim.Count())
	}
}

func TestReusedGeneralSummarySkipsStageOne(t *testing.T) {
	t.Parallel()
	const summary = "Screenshot of an e-mail client showing a message from Alice Smith."
	m := startMesh(t, providersim.Qwen, nil)
	m.sim.When(providersim.Match{JSON: true}).JSON(map[string]any{
		"sender": "Alice Smith", "recipients": []string{}, "email_addresses": []string{"alice@example.com"}, "subject": "",
	})
	stage1 := m.sim.When(providersim.Match{}).Text("stage 1 must not run")

	resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
		Scope:          scope(),
		Images:         []*visionv1.Image{{Name: "mail.png", Data: pngImage(t, 6), MimeType: "image/png"}},
		ContentType:    visionv1.ContentType_CONTENT_TYPE_EMAIL,
		GeneralSummary: summary,
	})
	if err != nil {
		t.Fatalf("AnalyzeImages: %v", err)
	}
	reqs := m.sim.ChatRequests()
	if len(reqs) != 1 || stage1.Hits() != 0 {
		t.Fatalf("provider got %d chat requests (%d stage 1), want only the stage 2 call", len(reqs), stage1.Hits())
	}
	if reqs[0].JSONMode == "" {
		t.Error("the one call is not a stage 2 (JSON) call")
	}
	u := userTurn(t, reqs[0])
	if !strings.Contains(u.Content, summary) || len(u.Images) != 1 {
		t.Errorf("stage 2 prompt lacks the reused summary or the image: %q, %d images", u.Content, len(u.Images))
	}
	if resp.GetGeneralSummary() != summary {
		t.Errorf("general summary = %q, want the reused one", resp.GetGeneralSummary())
	}
	if got := resp.GetImages()[0].GetGeneralDescription(); got != "" {
		t.Errorf("general description = %q, want empty (stage 1 did not run)", got)
	}
	if want := "Sender: Alice Smith\nE-mail addresses:\n- alice@example.com"; resp.GetTypeSpecificDetails() != want {
		t.Errorf("details = %q, want %q", resp.GetTypeSpecificDetails(), want)
	}

	t.Run("without a content type there is nothing to run", func(t *testing.T) {
		resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
			Scope:          scope(),
			Images:         []*visionv1.Image{{Name: "mail.png", Data: pngImage(t, 6), MimeType: "image/png"}},
			GeneralSummary: summary,
		})
		if err != nil {
			t.Fatalf("AnalyzeImages: %v", err)
		}
		if m.sim.Count() != 1 || resp.GetGeneralSummary() != summary || resp.GetTypeSpecificDetails() != "" {
			t.Errorf("upstream calls %d, summary %q, details %q: want no new call and the summary back",
				m.sim.Count(), resp.GetGeneralSummary(), resp.GetTypeSpecificDetails())
		}
	})
}

func TestNonImagesAndOversizedImagesAreSkipped(t *testing.T) {
	t.Parallel()
	m := startMesh(t, providersim.Qwen, map[string]string{"VISION_MAX_IMAGE_BYTES": "2048"})
	m.sim.When(providersim.Match{WithImages: true, LastUserContains: "shot.png"}).Text("A terminal with a stack trace.")
	m.sim.When(providersim.Match{WithImages: true, LastUserContains: "image 5"}).Text("A bar chart.")

	small := pngImage(t, 8)
	big := append(pngImage(t, 9), make([]byte, 4096)...)
	resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
		Scope: scope(),
		Images: []*visionv1.Image{
			{Name: "report.pdf", Data: []byte("%PDF-1.7\n1 0 obj\n<<>>\nendobj\n"), MimeType: "application/pdf"},
			{Name: "logo.svg", Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"/>`), MimeType: "image/svg+xml"},
			{Name: "huge.png", Data: big, MimeType: "image/png"},
			{Name: "shot.png", Data: small, MimeType: "image/png"},
			{Data: pngImage(t, 10)}, // no name, no MIME type: sniffed as PNG
		},
	})
	if err != nil {
		t.Fatalf("AnalyzeImages: %v", err)
	}
	imgs := resp.GetImages()
	if len(imgs) != 5 {
		t.Fatalf("got %d results, want one per image", len(imgs))
	}
	for i, want := range []string{"application/pdf", "image/svg+xml", "too large: 4"} {
		if !strings.Contains(imgs[i].GetSkippedReason(), want) || imgs[i].GetGeneralDescription() != "" {
			t.Errorf("%s: skipped %q, description %q; want skipped mentioning %q",
				imgs[i].GetName(), imgs[i].GetSkippedReason(), imgs[i].GetGeneralDescription(), want)
		}
	}
	if imgs[3].GetSkippedReason() != "" || imgs[3].GetGeneralDescription() != "A terminal with a stack trace." {
		t.Errorf("shot.png: skipped %q description %q", imgs[3].GetSkippedReason(), imgs[3].GetGeneralDescription())
	}
	if imgs[4].GetSkippedReason() != "" || imgs[4].GetGeneralDescription() != "A bar chart." {
		t.Errorf("unnamed PNG: skipped %q description %q", imgs[4].GetSkippedReason(), imgs[4].GetGeneralDescription())
	}
	reqs := m.sim.ChatRequests()
	if len(reqs) != 2 {
		t.Fatalf("provider got %d chat requests, want 2 (skipped images cost nothing)", len(reqs))
	}
	for _, r := range reqs {
		for _, img := range userTurn(t, r).Images {
			if !strings.HasPrefix(img, "data:image/png;base64,") {
				t.Errorf("provider got image %.40q, want only the PNGs", img)
			}
		}
	}

	t.Run("all skipped is an answer, not an error", func(t *testing.T) {
		resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
			Scope:       scope(),
			Images:      []*visionv1.Image{{Name: "report.pdf", Data: []byte("%PDF-1.7"), MimeType: "application/pdf"}},
			ContentType: visionv1.ContentType_CONTENT_TYPE_WIKI,
		})
		if err != nil {
			t.Fatalf("AnalyzeImages: %v", err)
		}
		if resp.GetImages()[0].GetSkippedReason() == "" || resp.GetGeneralSummary() != "" || resp.GetTypeSpecificDetails() != "" {
			t.Errorf("got %v, want the PDF skipped and no summaries", resp)
		}
		if m.sim.Count() != 2 {
			t.Errorf("provider got %d chat requests in all, want no new one", m.sim.Count())
		}
	})
}

func TestInvalidRequestsNameTheField(t *testing.T) {
	t.Parallel()
	m := startMesh(t, providersim.Qwen, map[string]string{"VISION_MAX_IMAGES": "2"})
	one := []*visionv1.Image{{Name: "a.png", Data: pngImage(t, 1), MimeType: "image/png"}}
	cases := []struct {
		name  string
		req   *visionv1.AnalyzeImagesRequest
		field string
	}{
		{"no images", &visionv1.AnalyzeImagesRequest{Scope: scope()}, "images"},
		{"too many images", &visionv1.AnalyzeImagesRequest{Scope: scope(), Images: append(slices.Clone(one), one[0], one[0])}, "images"},
		{"no scope", &visionv1.AnalyzeImagesRequest{Images: one}, "scope.tenant_id"},
		{"unknown content type", &visionv1.AnalyzeImagesRequest{Scope: scope(), Images: one, ContentType: 99}, "content_type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.client.AnalyzeImages(ctxTimeout(t), tc.req)
			st := wantStatus(t, err, codes.InvalidArgument)
			if got := badRequestField(st); got != tc.field {
				t.Errorf("field = %q, want %q (%v)", got, tc.field, st.Message())
			}
		})
	}
	if m.sim.Count() != 0 {
		t.Errorf("provider got %d requests for invalid input, want 0", m.sim.Count())
	}
}

func TestModelFailuresMapToStatusCodes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		code   codes.Code
		reason string
	}{
		{"provider down", 503, codes.Unavailable, "VISION_MODEL_UNAVAILABLE"},
		{"provider rejects the image", 400, codes.FailedPrecondition, "VISION_MODEL_FAILED"},
		{"rate limited", 429, codes.ResourceExhausted, "VISION_MODEL_BUSY"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := startMesh(t, providersim.Qwen, nil)
			m.sim.When(providersim.Match{}).Error(tc.status, "scripted failure")
			_, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
				Scope:  scope(),
				Images: []*visionv1.Image{{Name: "a.png", Data: pngImage(t, 1), MimeType: "image/png"}},
			})
			st := wantStatus(t, err, tc.code)
			if got := grpcx.Reason(err); got != tc.reason {
				t.Errorf("reason = %q, want %q", got, tc.reason)
			}
			if !strings.Contains(st.Message(), "stage 1, a.png") {
				t.Errorf("message %q does not say which stage and image failed", st.Message())
			}
		})
	}
}

func TestBadConfigurationStopsTheStartNamingIt(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"VISION_MODEL":           " ",
		"VISION_MAX_IMAGE_BYTES": "0",
		"VISION_MAX_PARALLEL":    "-1",
	}
	for name, value := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var cfg vision.Config
			if err := config.Load("", &cfg, config.Map(map[string]string{name: value})); err != nil {
				t.Fatal(err)
			}
			err := vision.Run(t.Context(), &cfg, service.Runtime{Logger: slog.New(slog.DiscardHandler), Listener: testkit.Listen(t)})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Run = %v, want an error naming %s", err, name)
			}
		})
	}
}

// noisePNG returns a real PNG of side×side random pixels: noise does not
// compress, so its size grows with side (about 3·side² bytes).
func noisePNG(t *testing.T, side int) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, side, side))
	rng := rand.New(rand.NewPCG(uint64(side), 7))
	for i := range img.Pix {
		img.Pix[i] = uint8(rng.UintN(256))
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestModelChosenByImageCountAndSize: with VISION_SMALL_MODEL set, a
// request of at most VISION_SMALL_MAX_IMAGES analysed images, each at
// most VISION_SMALL_MAX_IMAGE_BYTES, goes to the small model in both
// stages; more images, or one larger, to VISION_MODEL. The provider sees
// the model each logical name routes to, and the answer names the
// logical model used.
func TestModelChosenByImageCountAndSize(t *testing.T) {
	t.Parallel()
	// The size limit is exactly the largest small image's: "at most".
	limit := max(len(pngImage(t, 1)), len(pngImage(t, 2)), len(pngImage(t, 3)))
	m := startMesh(t, providersim.OpenAI, map[string]string{
		"VISION_SMALL_MODEL": "vision-small", "VISION_SMALL_MAX_IMAGES": "2", "VISION_SMALL_MAX_IMAGE_BYTES": fmt.Sprint(limit)})
	m.sim.When(providersim.Match{JSON: true, WithImages: true}).JSON(map[string]any{"sender": "Ana", "recipients": []string{"Bob"}, "email_addresses": []string{"ana@example.com"}, "subject": "Hi"})
	m.sim.When(providersim.Match{WithImages: true}).Text("A screenshot.")
	small, large := pngImage(t, 1), noisePNG(t, 48)
	var atLimit []byte
	for seed := range uint8(4) {
		if b := pngImage(t, seed); len(b) == limit {
			atLimit = b
		}
	}
	if len(small) > limit || len(large) <= limit || atLimit == nil {
		t.Fatalf("fixtures: small %d bytes, large %d: want them on either side of %d", len(small), len(large), limit)
	}
	img := func(name string, data []byte, mime string) *visionv1.Image {
		return &visionv1.Image{Name: name, Data: data, MimeType: mime}
	}
	for _, tc := range []struct {
		name    string
		images  []*visionv1.Image
		typ     visionv1.ContentType
		summary string // a reused stage 1 summary: stage 2 only
		logical string // the model the answer names
		calls   int    // provider calls, all to the model logical routes to
	}{
		{"one small image", []*visionv1.Image{img("a.png", small, "image/png")}, visionv1.ContentType_CONTENT_TYPE_GENERIC, "", "vision-small", 1},
		{"two small images, both stages", []*visionv1.Image{img("a.png", small, "image/png"), img("b.png", pngImage(t, 2), "image/png")},
			visionv1.ContentType_CONTENT_TYPE_EMAIL, "", "vision-small", 4},
		{"three small images", []*visionv1.Image{img("a.png", small, "image/png"), img("b.png", pngImage(t, 2), "image/png"), img("c.png", pngImage(t, 3), "image/png")},
			visionv1.ContentType_CONTENT_TYPE_GENERIC, "", "vision", 3},
		{"one image of exactly the size", []*visionv1.Image{img("edge.png", atLimit, "image/png")}, visionv1.ContentType_CONTENT_TYPE_GENERIC, "", "vision-small", 1},
		{"one image over the size", []*visionv1.Image{img("big.png", large, "image/png")}, visionv1.ContentType_CONTENT_TYPE_GENERIC, "", "vision", 1},
		{"a small image beside a large one", []*visionv1.Image{img("a.png", small, "image/png"), img("big.png", large, "image/png")},
			visionv1.ContentType_CONTENT_TYPE_EMAIL, "", "vision", 4},
		{"two small images and a skipped file count as two", []*visionv1.Image{img("a.png", small, "image/png"), img("b.png", pngImage(t, 2), "image/png"),
			img("notes.txt", []byte("not an image"), "text/plain")}, visionv1.ContentType_CONTENT_TYPE_GENERIC, "", "vision-small", 2},
		{"stage 2 alone of a large image", []*visionv1.Image{img("big.png", large, "image/png")}, visionv1.ContentType_CONTENT_TYPE_EMAIL, "An e-mail client.", "vision", 1},
		{"stage 2 alone of a small image", []*visionv1.Image{img("a.png", small, "image/png")}, visionv1.ContentType_CONTENT_TYPE_EMAIL, "An e-mail client.", "vision-small", 1},
	} {
		before := len(m.sim.ChatRequests())
		resp, err := m.client.AnalyzeImages(ctxTimeout(t), &visionv1.AnalyzeImagesRequest{
			Scope: scope(), Images: tc.images, ContentType: tc.typ, GeneralSummary: tc.summary})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		want := map[string]string{"vision": simModel, "vision-small": simSmallModel}[tc.logical]
		reqs := m.sim.ChatRequests()[before:]
		var seen []string
		for _, r := range reqs {
			seen = append(seen, r.Model)
		}
		if resp.GetModel() != tc.logical || len(reqs) != tc.calls || slices.ContainsFunc(seen, func(s string) bool { return s != want }) {
			t.Errorf("%s: answer names %q, provider saw %v; want %q and %d calls to %s", tc.name, resp.GetModel(), seen, tc.logical, tc.calls, want)
		}
	}
}
