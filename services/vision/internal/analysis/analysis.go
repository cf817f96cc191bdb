// Package analysis runs two-stage image analysis through the model gateway.
//
// Stage 1 describes each image in general terms ("a screenshot of a ticket
// tracker showing ..."). Stage 2 runs once the document's content type is
// known: it asks the vision model for the details that type cares about as
// JSON constrained by a schema, and renders them as text. A caller that ran
// stage 1 earlier passes its summary back, and stage 1 is not repeated.
package analysis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

// ModelClient is the part of the model gateway's client the analyzer uses.
// modelv1.ModelServiceClient satisfies it.
type ModelClient interface {
	Chat(ctx context.Context, in *modelv1.ChatRequest, opts ...grpc.CallOption) (*modelv1.ChatResponse, error)
}

// ContentType is a document's kind; every kind but Generic has a stage 2.
type ContentType int

// The content types.
const (
	// Generic documents get stage 1 only.
	Generic ContentType = iota
	// Email is an e-mail.
	Email
	// Ticket is an issue tracker ticket.
	Ticket
	// Wiki is a wiki page.
	Wiki
	// Log is log output.
	Log
)

// Image is one attachment.
type Image struct {
	// Name is the attachment name; it may be empty.
	Name string
	// Data holds the encoded image bytes.
	Data []byte
	// MIMEType is the declared type; when empty it is sniffed from Data.
	MIMEType string
}

// Request asks for an analysis.
type Request struct {
	// Images are the attachments, at least one.
	Images []Image
	// ContextText is the document text around the images.
	ContextText string
	// ContentType selects stage 2; Generic skips it.
	ContentType ContentType
	// GeneralSummary is a stage 1 summary from an earlier call; when set,
	// stage 1 is not run again.
	GeneralSummary string
}

// ImageResult is the analysis of one image.
type ImageResult struct {
	// Name is the attachment name.
	Name string
	// GeneralDescription is the stage 1 description; empty when stage 1 did
	// not run for this image.
	GeneralDescription string
	// TypeSpecificDetails is the rendered stage 2 result; empty when stage 2
	// did not run for this image.
	TypeSpecificDetails string
	// SkippedReason says why the image was not analysed; empty when it was.
	SkippedReason string
}

// Result is the analysis of a request.
type Result struct {
	// Images holds one result per requested image, in request order.
	Images []ImageResult
	// GeneralSummary is the stage 1 summary over all analysed images (or the
	// summary the request brought).
	GeneralSummary string
	// TypeSpecificDetails is the stage 2 result over all analysed images,
	// values merged without duplicates.
	TypeSpecificDetails string
	// Model is the logical model that was asked.
	Model string
	// Tokens are the model tokens the request spent, prompt and
	// completion, over all its calls.
	Tokens int64
}

// Options configure an Analyzer.
type Options struct {
	// Model is the logical model name the gateway routes, e.g. "vision".
	Model string
	// SmallModel, when set, is the logical model of small requests: at
	// most SmallMaxImages images to analyse, each at most
	// SmallMaxImageBytes (a cheaper, faster model is enough for a
	// screenshot or two; many or large images go to Model).
	SmallModel string
	// SmallMaxImages and SmallMaxImageBytes bound a small request; both
	// must be positive when SmallModel is set.
	SmallMaxImages, SmallMaxImageBytes int
	// MaxImageBytes is the largest image analysed; larger ones are skipped.
	MaxImageBytes int
	// MaxImages is the most images one request may carry.
	MaxImages int
	// MaxParallel is how many model calls one request runs at once.
	MaxParallel int
	// MaxContextChars bounds the context text put in each prompt, in runes.
	MaxContextChars int
}

// InvalidInputError is a request the analyzer refuses; Field names the
// offending request field.
type InvalidInputError struct {
	// Field is the request field, e.g. "images".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

func (e *InvalidInputError) Error() string { return e.Field + ": " + e.Reason }

// ModelError is a failed model call. Err is the gateway's error (a gRPC
// status), so callers can tell a gateway that is down from one that refused.
type ModelError struct {
	// Stage is 1 or 2.
	Stage int
	// Image is the image's label ("name" or "image N").
	Image string
	// Err is the underlying error.
	Err error
}

func (e *ModelError) Error() string {
	return fmt.Sprintf("vision model, stage %d, %s: %v", e.Stage, e.Image, e.Err)
}

// Unwrap returns the underlying error.
func (e *ModelError) Unwrap() error { return e.Err }

// Analyzer runs analyses. It is safe for concurrent use.
type Analyzer struct {
	client ModelClient
	opts   Options
}

// New returns an Analyzer calling client. Every option must be positive
// (Model non-empty).
func New(client ModelClient, opts Options) (*Analyzer, error) {
	switch {
	case client == nil:
		return nil, errors.New("analysis: nil model client")
	case strings.TrimSpace(opts.Model) == "":
		return nil, errors.New("analysis: empty model name")
	case opts.MaxImageBytes <= 0, opts.MaxImages <= 0, opts.MaxParallel <= 0, opts.MaxContextChars <= 0:
		return nil, fmt.Errorf("analysis: limits must be positive: %+v", opts)
	case strings.TrimSpace(opts.SmallModel) != "" && (opts.SmallMaxImages <= 0 || opts.SmallMaxImageBytes <= 0):
		return nil, fmt.Errorf("analysis: a small model needs positive limits: %d images, %d bytes", opts.SmallMaxImages, opts.SmallMaxImageBytes)
	}
	return &Analyzer{client: client, opts: opts}, nil
}

// Analyze runs stage 1 on every admissible image unless req.GeneralSummary
// is set, and stage 2 when req.ContentType is not Generic. Images that are
// not raster images, are empty or are over the size limit are skipped with a
// reason and cost no model call. It returns *InvalidInputError for a request
// without images or with too many, and *ModelError when a model call fails;
// the first failure cancels the calls still running.
func (a *Analyzer) Analyze(ctx context.Context, req Request) (*Result, error) {
	if len(req.Images) == 0 {
		return nil, &InvalidInputError{Field: "images", Reason: "at least one image is required"}
	}
	if len(req.Images) > a.opts.MaxImages {
		return nil, &InvalidInputError{Field: "images", Reason: fmt.Sprintf("at most %d images per request, got %d", a.opts.MaxImages, len(req.Images))}
	}
	spec, stage2 := kinds[req.ContentType]
	stage1 := strings.TrimSpace(req.GeneralSummary) == ""
	contextText := truncate(strings.TrimSpace(req.ContextText), a.opts.MaxContextChars)

	res := &Result{Images: make([]ImageResult, len(req.Images))}
	images := make([]Image, len(req.Images))
	var work []int
	for i, img := range req.Images {
		res.Images[i].Name = img.Name
		mime, reason := admit(img, a.opts.MaxImageBytes)
		if reason != "" {
			res.Images[i].SkippedReason = reason
			continue
		}
		images[i] = Image{Name: label(img.Name, i), Data: img.Data, MIMEType: mime}
		work = append(work, i)
	}
	res.Model = a.model(images, work)
	if !stage1 {
		res.GeneralSummary = strings.TrimSpace(req.GeneralSummary)
	}

	found := make([]details, len(req.Images))
	var tokens atomic.Int64
	err := a.each(ctx, work, func(ctx context.Context, i int) error {
		img := images[i]
		summary := res.GeneralSummary
		if stage1 {
			desc, err := a.describe(ctx, res.Model, img, contextText, &tokens)
			if err != nil {
				return err
			}
			res.Images[i].GeneralDescription = desc
			summary = desc
		}
		if stage2 {
			d, err := a.extract(ctx, res.Model, spec, img, summary, stage1, contextText, &tokens)
			if err != nil {
				return err
			}
			found[i] = d
			res.Images[i].TypeSpecificDetails = spec.render(d)
		}
		return nil
	})
	res.Tokens = tokens.Load()
	if err != nil {
		return nil, err
	}

	if stage1 {
		res.GeneralSummary = summarize(res.Images, images, work)
	}
	if stage2 && len(work) > 0 {
		analysed := make([]details, 0, len(work))
		for _, i := range work {
			analysed = append(analysed, found[i])
		}
		res.TypeSpecificDetails = spec.render(merge(analysed))
	}
	return res, nil
}

// model is the logical model for a request analysing images[work]: the
// small one when it is configured and the request is small by its count
// and every image's size, else Model. Both stages of the same images (a
// stage 2 request brings them again) get the same model.
func (a *Analyzer) model(images []Image, work []int) string {
	if strings.TrimSpace(a.opts.SmallModel) == "" || len(work) > a.opts.SmallMaxImages {
		return a.opts.Model
	}
	for _, i := range work {
		if len(images[i].Data) > a.opts.SmallMaxImageBytes {
			return a.opts.Model
		}
	}
	return strings.TrimSpace(a.opts.SmallModel)
}

// describe is stage 1 for one image.
func (a *Analyzer) describe(ctx context.Context, model string, img Image, contextText string, tokens *atomic.Int64) (string, error) {
	resp, err := a.client.Chat(ctx, &modelv1.ChatRequest{
		Model: model,
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: stage1System},
			{Role: modelv1.Role_ROLE_USER, Content: stage1Prompt(img.Name, contextText), Images: imageParts(img)},
		},
	})
	if err != nil {
		return "", &ModelError{Stage: 1, Image: img.Name, Err: err}
	}
	tokens.Add(spent(resp))
	return strings.TrimSpace(resp.GetMessage().GetContent()), nil
}

// extract is stage 2 for one image: JSON constrained by spec's schema,
// parsed into details.
func (a *Analyzer) extract(ctx context.Context, model string, spec *kind, img Image, summary string, ownSummary bool, contextText string, tokens *atomic.Int64) (details, error) {
	resp, err := a.client.Chat(ctx, &modelv1.ChatRequest{
		Model: model,
		Messages: []*modelv1.Message{
			{Role: modelv1.Role_ROLE_SYSTEM, Content: stage2System(spec)},
			{Role: modelv1.Role_ROLE_USER, Content: stage2Prompt(spec, img.Name, summary, ownSummary, contextText), Images: imageParts(img)},
		},
		ResponseFormat: &modelv1.ResponseFormat{
			Type:       modelv1.ResponseFormatType_RESPONSE_FORMAT_TYPE_JSON_SCHEMA,
			JsonSchema: spec.schema,
			SchemaName: spec.SchemaName,
		},
	})
	if err != nil {
		return details{}, &ModelError{Stage: 2, Image: img.Name, Err: err}
	}
	tokens.Add(spent(resp))
	d, err := spec.parse(resp.GetMessage().GetContent())
	if err != nil {
		return details{}, &ModelError{Stage: 2, Image: img.Name, Err: err}
	}
	return d, nil
}

// spent is the tokens a model call used, prompt and completion.
func spent(resp *modelv1.ChatResponse) int64 {
	return resp.GetUsage().GetTotalTokens()
}

// each runs fn for every index in idx, at most MaxParallel at once. The
// first error cancels the context the others run with and is returned.
// Each fn writes only to its own index of shared slices, so no lock is
// needed around them.
func (a *Analyzer) each(ctx context.Context, idx []int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, a.opts.MaxParallel)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, i := range idx {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// summarize is the stage 1 summary over all analysed images: the one
// description, or one labelled line per image.
func summarize(results []ImageResult, images []Image, work []int) string {
	if len(work) == 1 {
		return results[work[0]].GeneralDescription
	}
	var b strings.Builder
	for _, i := range work {
		desc := results[i].GeneralDescription
		if desc == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s: %s", images[i].Name, desc)
	}
	return b.String()
}

func imageParts(img Image) []*modelv1.ImagePart {
	return []*modelv1.ImagePart{{Data: img.Data, MimeType: img.MIMEType}}
}

// label names an image in prompts and errors: its name, or its position.
func label(name string, i int) string {
	if n := strings.TrimSpace(name); n != "" {
		return n
	}
	return fmt.Sprintf("image %d", i+1)
}

// truncate cuts s to max runes, marking the cut.
func truncate(s string, max int) string {
	n := 0
	for i := range s {
		if n == max {
			return s[:i] + " […]"
		}
		n++
	}
	return s
}
