package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	visionv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/vision/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/contenttype"
)

// Phase names, in pipeline order; each ends with an intake.<phase> event.
const (
	PhaseVisionStage1 = "vision_stage1"
	PhaseContentType  = "content_type"
	PhaseVisionStage2 = "vision_stage2"
	PhaseExtraction   = "extraction"
	PhaseIndexing     = "indexing"
	PhaseRouting      = "routing"
)

// VisionClient is the part of the vision service the pipeline uses;
// visionv1.VisionServiceClient implements it.
type VisionClient interface {
	AnalyzeImages(ctx context.Context, in *visionv1.AnalyzeImagesRequest, opts ...grpc.CallOption) (*visionv1.AnalyzeImagesResponse, error)
}

// Qualifier runs the qualifier's phases up to the indexing plan: vision
// stage 1, content type, vision stage 2, type-specific extraction, base
// node and base info. Indexing and routing belong to package intake,
// which stores the chunks and, in the extraction job, routes. It is safe
// for concurrent use.
type Qualifier struct {
	// Models makes the model calls; nil makes none.
	Models *Models
	// Vision analyses images; nil skips vision (recorded on the phase).
	Vision VisionClient
	// MaxImageBytes is the largest image sent to vision (default 10 MiB).
	MaxImageBytes int
	// MaxImages is the most images sent to vision (default 8), a PDF's
	// rendered pages included.
	MaxImages int
	// PDF reads PDF attachments; nil reads them with PDF's defaults.
	PDF *PDF
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Input is one intake.
type Input struct {
	Scope         *commonv1.Scope
	CorrelationID string
	SourceURN     string
	SourceType    indexerv1.SourceType
	Title, Text   string
	Attachments   []Attachment
	// Prior, when set, is an earlier run's state of the same content
	// (an interrupted ingest finished by reconciliation): its vision and
	// attachments are kept instead of calling vision again.
	Prior *indexerv1.IntakePipeline
	// PriorAttachmentText, with Prior, is what that run's attachments
	// added to the text (Output.AttachmentText), read again from the
	// store since the attachments are not kept.
	PriorAttachmentText string
}

// Output is the state after extraction, with what indexing needs.
type Output struct {
	// Pipeline is the state: task, attachments, vision, content type,
	// extraction, indexing plan (base node key, base info), phases.
	Pipeline *indexerv1.IntakePipeline
	// FineType and FineReason are the finer content type for the
	// ingestion-time extracts, agreeing with the qualifier's type.
	FineType, FineReason string
	// Body is the text chunked with the chunker (the e-mail's cleaned
	// body, else the text); empty for a log, whose content is Sections.
	Body string
	// Sections replace the chunker's chunks: a log's summary, key events
	// and critical details.
	Sections []string
	// VisionText describes the images for a chunk of its own; empty
	// without vision.
	VisionText string
	// AttachmentText is what the attachments added to the text (the PDFs'
	// text layers), cut at MaxKeptAttachmentText bytes: kept with the
	// document so an interrupted ingest is finished with it (Input.
	// PriorAttachmentText).
	AttachmentText string
}

// MaxKeptAttachmentText caps Output.AttachmentText: with the raw content
// (at most 8 MiB by default) and the original text (1 MiB) the document's
// record stays under MongoDB's 16 MiB. The chunks of the ingest that read
// the attachments hold all of their text.
const MaxKeptAttachmentText = 4 << 20

// MaxStoredBody caps, in characters, the e-mail body kept in the
// extraction (the record holds the raw content too, and MongoDB's
// documents 16 MiB); the chunks are cut from the whole body.
const MaxStoredBody = 64 << 10

// visualTypes are the image types vision reads, sniffed from the bytes
// (http.DetectContentType implements the WHATWG MIME sniffing standard).
var visualTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// SniffImage returns the image type of data, or "" and the type the bytes
// have when they are not a PNG, JPEG, GIF or WEBP image.
func SniffImage(data []byte) (imageType, sniffed string) {
	sniffed = http.DetectContentType(data)
	if visualTypes[sniffed] {
		return sniffed, sniffed
	}
	return "", sniffed
}

// Qualify runs the phases. It always returns an output: a phase that
// fails records its error on the state, and the next phase runs with what
// the state holds.
func (q *Qualifier) Qualify(ctx context.Context, in Input) *Output {
	p := &indexerv1.IntakePipeline{CorrelationId: in.CorrelationID, Scope: in.Scope, SourceUrn: in.SourceURN,
		Vision: &indexerv1.IntakeVision{}, Indexing: &indexerv1.IntakeIndexing{}}
	out := &Output{Pipeline: p}
	text := in.Text

	// The e-mail inside the text, if it is one: its body is the text the
	// phases read, its attachments join the caller's.
	email, emailErr := ParseEmail(in.Text)
	atts := in.Attachments
	if emailErr == nil {
		text = emailText(email)
		atts = append(append([]Attachment(nil), atts...), email.Attachments...)
	}

	var images []*visionv1.Image
	var read attachmentsRead
	if in.Prior != nil {
		p.Attachments, p.Vision = in.Prior.GetAttachments(), in.Prior.GetVision()
		read.pdfText = in.PriorAttachmentText
	} else {
		read = q.attachments(ctx, atts)
		p.Attachments, images = read.list, read.images
	}
	// A PDF's text layer is the document's text as much as the body is.
	if read.pdfText != "" {
		text = strings.TrimRight(text, "\n") + "\n\n" + read.pdfText
		out.AttachmentText = read.pdfText
		if len(out.AttachmentText) > MaxKeptAttachmentText {
			out.AttachmentText = strings.ToValidUTF8(out.AttachmentText[:MaxKeptAttachmentText], "")
		}
	}

	// Vision stage 1.
	ph := q.begin(PhaseVisionStage1)
	for _, e := range read.errs {
		ph.fail("%s", e)
	}
	switch {
	case in.Prior != nil:
		ph.skip("kept from the interrupted ingest of this content")
	case len(images) == 0:
		ph.skip("no visual attachments")
	case q.Vision == nil:
		ph.skip("vision is not configured")
	default:
		req := &visionv1.AnalyzeImagesRequest{Scope: in.Scope, Images: images, ContextText: clip(strings.ToValidUTF8(text, ""), 4000)}
		resp, err := q.Vision.AnalyzeImages(ctx, req)
		if err != nil {
			ph.fail("vision stage 1: %v", err)
			break
		}
		ph.tokens = resp.GetTokens()
		SetVision(p, &indexerv1.IntakeVision{GeneralSummary: resp.GetGeneralSummary(), Model: resp.GetModel()})
		for _, ia := range resp.GetImages() {
			if name, page, ok := pdfOf(ia.GetName()); ok {
				// A PDF's pages: their descriptions, in page order, are
				// the PDF's.
				for _, a := range p.Attachments {
					if a.GetName() == name && a.GetVisual() {
						a.VisionAnalysis = strings.TrimSpace(fmt.Sprintf("%s\npage %d: %s", a.GetVisionAnalysis(), page, ia.GetGeneralDescription()))
						break
					}
				}
				continue
			}
			for _, a := range p.Attachments {
				if a.GetName() == ia.GetName() && a.GetVisual() && a.GetVisionAnalysis() == "" {
					a.VisionAnalysis = ia.GetGeneralDescription()
					if ia.GetSkippedReason() != "" {
						a.Note = "vision skipped it: " + ia.GetSkippedReason()
					}
					break
				}
			}
		}
	}
	q.end(p, ph)

	// Content type: rules, then the model when they are unsure.
	ph = q.begin(PhaseContentType)
	out.FineType, out.FineReason = q.contentType(ctx, in, text, p, ph)
	q.end(p, ph)

	// Vision stage 2.
	ph = q.begin(PhaseVisionStage2)
	vt, typed := stage2Types[p.GetContentType().GetType()]
	switch {
	case in.Prior != nil && p.GetVision().GetTypeSpecificDetails() != "":
		ph.skip("kept from the interrupted ingest of this content")
	case p.GetVision().GetGeneralSummary() == "":
		ph.skip("stage 1 did not run")
	case !typed:
		ph.skip("content type GENERIC")
	case q.Vision == nil || len(images) == 0:
		ph.skip("no images to send again")
	default:
		req := &visionv1.AnalyzeImagesRequest{Scope: in.Scope, Images: images, ContextText: clip(strings.ToValidUTF8(text, ""), 4000),
			ContentType: vt, GeneralSummary: p.GetVision().GetGeneralSummary()}
		resp, err := q.Vision.AnalyzeImages(ctx, req)
		if err != nil {
			ph.fail("vision stage 2: %v", err)
			break
		}
		ph.tokens = resp.GetTokens()
		SetVision(p, &indexerv1.IntakeVision{TypeSpecificDetails: resp.GetTypeSpecificDetails()})
	}
	q.end(p, ph)
	if v := p.GetVision(); v.GetGeneralSummary() != "" {
		out.VisionText = strings.TrimSpace(v.GetGeneralSummary() + "\n" + v.GetTypeSpecificDetails())
	}

	// Type-specific extraction.
	ph = q.begin(PhaseExtraction)
	out.Body = text
	switch p.GetContentType().GetType() {
	case indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL:
		var ex *indexerv1.EmailExtraction
		if emailErr == nil {
			ex = email.Extraction
		} else {
			// Pasted without its header block: what the text says.
			f := fields(text)
			ex = &indexerv1.EmailExtraction{From: first(f, "from"), To: splitList(first(f, "to")), Cc: splitList(first(f, "cc")),
				Subject: first(f, "subject"), Body: CleanEmailBody(text)}
			if ex.Subject == "" {
				ex.Subject = in.Title
			}
			ex.Thread = ThreadSubject(ex.Subject)
			if !errors.Is(emailErr, ErrNotEmail) {
				ph.fail("e-mail: %v", emailErr)
			}
		}
		out.Body = ex.GetBody()
		if read.pdfText != "" {
			out.Body += "\n\n" + read.pdfText // the PDFs the message carried
		}
		ex.Body = clip(ex.GetBody(), MaxStoredBody) // the chunks hold all of it
		p.Extraction = &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Email{Email: ex}}
	case indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA:
		p.Extraction = &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Jira{Jira: ParseJira(in.Title, text)}}
	case indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE:
		p.Extraction = &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Confluence{Confluence: ParseConfluence(in.Title, text)}}
	case indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_LOG:
		facts := ParseLog(text)
		ex := facts.Extraction()
		tokens, err := q.Models.SummarizeLog(ctx, in.Title, facts.Digest(text, 12000), ex)
		ph.tokens += tokens
		if err != nil && !errors.Is(err, ErrNoModel) {
			ph.fail("log summary: %v; the rules' summary is kept", err)
		}
		out.Body = ""
		out.Sections = []string{
			"Log summary: " + ex.GetSummary(),
			"Key events:\n" + strings.Join(ex.GetKeyEvents(), "\n"),
			"Critical details:\n" + strings.Join(ex.GetCriticalDetails(), "\n"),
		}
		p.Extraction = &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Log{Log: ex}}
	default:
		p.Extraction = &indexerv1.IntakeExtraction{Result: &indexerv1.IntakeExtraction_Generic{Generic: &indexerv1.GenericExtraction{
			BaseInfo: genericBaseInfo(in.Title, text)}}}
	}
	p.Indexing.BaseNodeKey = BaseNodeKey(p.GetContentType().GetType(), in.CorrelationID)
	p.Indexing.BaseInfo = BaseInfo(p)
	q.end(p, ph)
	return out
}

// emailText is what the phases read of an e-mail: its main headers and
// its whole decoded body.
func emailText(e *Email) string {
	x := e.Extraction
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\n", x.GetFrom())
	if len(x.GetTo()) > 0 {
		fmt.Fprintf(&b, "To: %s\n", strings.Join(x.GetTo(), ", "))
	}
	if len(x.GetCc()) > 0 {
		fmt.Fprintf(&b, "Cc: %s\n", strings.Join(x.GetCc(), ", "))
	}
	fmt.Fprintf(&b, "Subject: %s\n\n%s", x.GetSubject(), e.Text)
	return b.String()
}

func splitList(s string) []string {
	var out []string
	for _, x := range strings.Split(s, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// attachmentsRead is what the attachments gave the pipeline.
type attachmentsRead struct {
	list   []*indexerv1.IntakeAttachment
	images []*visionv1.Image
	// pdfText is the PDFs' text layers, each under a line naming it.
	pdfText string
	// errs are the errors reading PDFs, for vision stage 1's phase.
	errs []string
}

// attachments lists every attachment with its sniffed type, and returns
// the images vision may see: sniffed as PNG, JPEG, GIF or WEBP (whatever
// was declared), and the first pages of each PDF rendered to PNG, within
// the size and count limits. A PDF's text layer is read too.
func (q *Qualifier) attachments(ctx context.Context, atts []Attachment) attachmentsRead {
	maxBytes, maxImages := q.MaxImageBytes, q.MaxImages
	if maxBytes <= 0 {
		maxBytes = 10 << 20
	}
	if maxImages <= 0 {
		maxImages = 8
	}
	var r attachmentsRead
	var pdfTexts []string
	// The PDFs of an intake share two thirds of the time its call has
	// left: each run of poppler may take PDF.Timeout, and a few PDFs that
	// each take it (a compressed page that unpacks to hundreds of MB)
	// would otherwise run the intake past its deadline and fail it whole.
	// The PDFs past the budget are kept and listed, unread.
	pdfCtx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		pdfCtx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*2/3))
		defer cancel()
	}
	for _, a := range atts {
		img, sniffed := SniffImage(a.Data)
		ia := &indexerv1.IntakeAttachment{Name: a.Name, MimeType: sniffed, DeclaredMimeType: a.MimeType, SizeBytes: int64(len(a.Data))}
		switch {
		case sniffed == "application/pdf" && pdfCtx.Err() != nil && ctx.Err() == nil:
			ia.Note = "PDF kept and listed, not read: " + errPDFBudget.Error()
			r.errs = append(r.errs, a.Name+": "+errPDFBudget.Error())
		case sniffed == "application/pdf":
			render := len(r.images) < maxImages
			text, pages, note, errs := q.readPDF(pdfCtx, a, render)
			ia.Note, r.errs = note, append(r.errs, errs...)
			if text.Text != "" {
				pdfTexts = append(pdfTexts, fmt.Sprintf("Attachment %s (PDF, %d pages):\n%s", a.Name, text.Pages, text.Text))
			}
			if !render {
				ia.Note += fmt.Sprintf("; more than %d images: pages not sent to vision", maxImages)
			}
			for _, pg := range pages {
				if len(r.images) >= maxImages {
					ia.Note += fmt.Sprintf("; more than %d images: pages %d on not sent to vision", maxImages, pg.Number)
					break
				}
				if len(pg.PNG) > maxBytes {
					ia.Note += fmt.Sprintf("; page %d of %d bytes, over the %d-byte limit: not sent to vision", pg.Number, len(pg.PNG), maxBytes)
					continue
				}
				ia.Visual = true
				r.images = append(r.images, &visionv1.Image{Name: pdfPageName(a.Name, pg.Number), Data: pg.PNG, MimeType: "image/png"})
			}
		case img == "" && strings.HasPrefix(a.MimeType, "image/"):
			ia.Note = fmt.Sprintf("declared %s but the bytes are %s: not sent to vision", a.MimeType, sniffed)
		case img == "":
			ia.Note = "no visual content: kept and listed"
		case len(a.Data) > maxBytes:
			ia.Note = fmt.Sprintf("image of %d bytes, over the %d-byte limit: not sent to vision", len(a.Data), maxBytes)
		case len(r.images) >= maxImages:
			ia.Note = fmt.Sprintf("more than %d images: not sent to vision", maxImages)
		default:
			ia.Visual = true
			r.images = append(r.images, &visionv1.Image{Name: a.Name, Data: a.Data, MimeType: img})
		}
		r.list = append(r.list, ia)
	}
	r.pdfText = strings.Join(pdfTexts, "\n\n")
	return r
}

// stage2Types maps the qualifier's types to vision's, for stage 2.
var stage2Types = map[indexerv1.IntakeContentType]visionv1.ContentType{
	indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL:      visionv1.ContentType_CONTENT_TYPE_EMAIL,
	indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA:       visionv1.ContentType_CONTENT_TYPE_TICKET,
	indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE: visionv1.ContentType_CONTENT_TYPE_WIKI,
	indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_LOG:        visionv1.ContentType_CONTENT_TYPE_LOG,
}

// Qualifier types of the rules' finer types, and the finer type that
// stands for each qualifier type when the model overrules the rules.
var (
	qualifierOf = map[string]indexerv1.IntakeContentType{
		contenttype.Email:  indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL,
		contenttype.Ticket: indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA,
		contenttype.Wiki:   indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE,
		contenttype.Log:    indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_LOG,
	}
	fineOf = map[indexerv1.IntakeContentType]string{
		indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_EMAIL:      contenttype.Email,
		indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_JIRA:       contenttype.Ticket,
		indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE: contenttype.Wiki,
		indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_LOG:        contenttype.Log,
		indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC:    contenttype.Generic,
	}
)

// QualifierType is the qualifier's type of a finer type: e-mail, ticket,
// wiki and log have their own; reports, financial reports, meeting notes
// and API docs are GENERIC.
func QualifierType(fine string) indexerv1.IntakeContentType {
	if t, ok := qualifierOf[fine]; ok {
		return t
	}
	return indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC
}

// Compatible reports whether a finer type may stand under a qualifier
// type: its own, or, for a wiki page or anything generic, the finer
// structured kinds (a Confluence page of meeting notes is meeting_notes).
func Compatible(fine string, t indexerv1.IntakeContentType) bool {
	q := QualifierType(fine)
	if q == t {
		return true
	}
	return q == indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC && fine != contenttype.Generic &&
		t == indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_CONFLUENCE
}

// contentType decides the qualifier's type and returns the finer type
// that agrees with it.
func (q *Qualifier) contentType(ctx context.Context, in Input, text string, p *indexerv1.IntakePipeline, ph *phase) (fine, fineReason string) {
	r := contenttype.Detect(in.Title, text, in.SourceType)
	d := &indexerv1.IntakeContentTypeDecision{Type: QualifierType(r.Type), DecidedBy: indexerv1.DecidedBy_DECIDED_BY_RULES,
		Reason: "rules: " + r.Type + ": " + r.Reason}
	fine, fineReason = r.Type, r.Reason
	if !r.Confident {
		t, reason, tokens, err := q.Models.DetectContentType(ctx, in.Title, text, p.GetVision().GetGeneralSummary())
		ph.tokens += tokens
		switch {
		case errors.Is(err, ErrNoModel):
			d.Reason += " (not confident, and no model is configured to ask)"
		case err != nil:
			ph.fail("content type model: %v", err)
			d.Type, d.DecidedBy = indexerv1.IntakeContentType_INTAKE_CONTENT_TYPE_GENERIC, indexerv1.DecidedBy_DECIDED_BY_FALLBACK
			d.Reason = fmt.Sprintf("the rules were not confident (%s: %s) and the model gave no answer: GENERIC", r.Type, r.Reason)
		default:
			d.Type, d.DecidedBy = t, indexerv1.DecidedBy_DECIDED_BY_MODEL
			d.Reason = fmt.Sprintf("model: %s (the rules were not confident: %s, %s)", reason, r.Type, r.Reason)
		}
		if !Compatible(fine, d.Type) {
			fine, fineReason = fineOf[d.Type], d.Reason
		}
	}
	d.FineType = fine
	p.ContentType = d
	return fine, fineReason
}

// BaseNodeKey names an intake's base node: "<type>_<correlation id>".
func BaseNodeKey(t indexerv1.IntakeContentType, correlationID string) string {
	name := strings.ToLower(strings.TrimPrefix(t.String(), "INTAKE_CONTENT_TYPE_"))
	return name + "_" + keyChars.ReplaceAllString(correlationID, "_")
}

var keyChars = regexp.MustCompile(`[^A-Za-z0-9_]`)

// BaseInfo is the base node's summary of the extraction, stored as the
// searchable base chunk.
func BaseInfo(p *indexerv1.IntakePipeline) string {
	x := p.GetExtraction()
	switch {
	case x.GetEmail() != nil:
		e := x.GetEmail()
		s := fmt.Sprintf("Email from %s: %s", e.GetFrom(), e.GetSubject())
		if len(e.GetTo()) > 0 {
			s += "\nTo: " + strings.Join(e.GetTo(), ", ")
		}
		if len(e.GetCc()) > 0 {
			s += "\nCc: " + strings.Join(e.GetCc(), ", ")
		}
		if e.GetDate() != nil {
			s += "\nDate: " + e.GetDate().AsTime().Format(time.RFC3339)
		}
		return s
	case x.GetJira() != nil:
		j := x.GetJira()
		parts := []string{fmt.Sprintf("Jira %s: %s", j.GetKey(), j.GetSummary())}
		for _, f := range [][2]string{{"status", j.GetStatus()}, {"type", j.GetType()}, {"priority", j.GetPriority()}, {"assignee", j.GetAssignee()},
			{"reporter", j.GetReporter()}, {"epic", j.GetEpic()}, {"sprint", j.GetSprint()}} {
			if f[1] != "" {
				parts = append(parts, f[0]+" "+f[1])
			}
		}
		return strings.Join(parts, "; ")
	case x.GetConfluence() != nil:
		c := x.GetConfluence()
		s := "Confluence page " + c.GetTitle()
		if c.GetAuthor() != "" {
			s += " by " + c.GetAuthor()
		}
		if c.GetTopic() != "" {
			s += ": " + c.GetTopic()
		}
		if len(c.GetHeadings()) > 0 {
			s += "\nSections: " + strings.Join(c.GetHeadings(), "; ")
		}
		return s
	case x.GetLog() != nil:
		return "Log: " + x.GetLog().GetSummary()
	}
	return x.GetGeneric().GetBaseInfo()
}

func genericBaseInfo(title, text string) string {
	s := firstSentence(text)
	if title == "" {
		return s
	}
	if s == "" {
		return title
	}
	return title + ": " + s
}

// phase times one phase and collects its errors.
type phase struct {
	p       *indexerv1.IntakePhase
	began   time.Time
	tokens  int64
	skipped string
}

func (q *Qualifier) now() time.Time {
	if q.Now != nil {
		return q.Now()
	}
	return time.Now()
}

func (q *Qualifier) begin(name string) *phase {
	return &phase{p: &indexerv1.IntakePhase{Name: name}, began: q.now()}
}

func (ph *phase) skip(why string) { ph.skipped = why }

func (ph *phase) fail(format string, args ...any) {
	ph.p.Errors = append(ph.p.Errors, fmt.Sprintf(format, args...))
}

func (q *Qualifier) end(p *indexerv1.IntakePipeline, ph *phase) {
	ph.p.Duration = durationpb.New(q.now().Sub(ph.began))
	ph.p.Tokens, ph.p.Skipped = ph.tokens, ph.skipped
	p.Phases = append(p.Phases, ph.p)
}
