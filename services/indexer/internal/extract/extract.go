// Package extract turns documents into structured extracts at ingestion
// time, so retrieval hands the model clean data instead of raw markdown.
// Every extractor implements [Extractor]; rule-based ones (financial
// tables, meeting notes, API docs) are deterministic and report confidence
// 1.0, and the LLM extractor summarises prose through the model gateway
// with a JSON schema. [Run] runs a set of extractors over one document,
// isolating failures: one extractor failing never stops the others.
package extract

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// Document is what an extractor sees of a document.
type Document struct {
	// ID is the document id.
	ID string
	// Title is the document title.
	Title string
	// SourceType is where it came from.
	SourceType indexerv1.SourceType
	// SourceURL is its origin.
	SourceURL string
	// ContentType is the detected content type, e.g. "meeting_notes".
	ContentType string
	// Text is the raw content.
	Text string
	// VisionSummary describes the image attachments, if any.
	VisionSummary string
}

// Extract is structured data taken from a document.
type Extract struct {
	// Type is the extract type, e.g. "financial".
	Type string
	// SchemaVersion is the extractor's schema version.
	SchemaVersion int
	// Data is the structured data, JSON-compatible (strings, float64,
	// bools, []any, map[string]any).
	Data map[string]any
	// Confidence is in [0, 1]; rule-based extracts are 1.0.
	Confidence float64
	// SpanStart and SpanEnd are the byte offsets of the source span.
	SpanStart, SpanEnd int
	// Extractor is the name of the extractor that produced it.
	Extractor string
}

// Extractor produces extracts from the documents it handles.
// Implementations must be safe for concurrent use.
type Extractor interface {
	// Name identifies the extractor in jobs and in stored extracts.
	Name() string
	// SchemaVersion is the version of the extracts' schema; raising it
	// re-extracts every document the extractor handled.
	SchemaVersion() int
	// CanHandle reports whether Extract applies to doc; it must be cheap.
	CanHandle(doc *Document) bool
	// Extract returns doc's extracts, possibly none.
	Extract(ctx context.Context, doc *Document) ([]Extract, error)
}

// RunStatus is the outcome of one extractor over one document.
type RunStatus = indexerv1.ExtractorRunStatus

// Outcome records what one extractor did.
type Outcome struct {
	// Extractor is its name.
	Extractor string
	// SchemaVersion is its schema version.
	SchemaVersion int
	// Status is succeeded, failed or skipped.
	Status RunStatus
	// Extracts it produced.
	Extracts []Extract
	// Err is why it failed.
	Err error
	// Duration is the wall time of Extract.
	Duration time.Duration
}

// Run runs every extractor that can handle doc, one after another, each
// bounded by timeout (0: no bound), and returns one outcome per extractor
// in order. An extractor that returns an error or panics is recorded as
// failed; the others still run. Extracts are stamped with the extractor's
// name and schema version.
func Run(ctx context.Context, doc *Document, extractors []Extractor, timeout time.Duration) []Outcome {
	out := make([]Outcome, 0, len(extractors))
	for _, ex := range extractors {
		o := Outcome{Extractor: ex.Name(), SchemaVersion: ex.SchemaVersion()}
		if !safeCanHandle(ex, doc) {
			o.Status = indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SKIPPED
			out = append(out, o)
			continue
		}
		start := time.Now()
		exs, err := runOne(ctx, ex, doc, timeout)
		o.Duration = time.Since(start)
		if err != nil {
			o.Status = indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_FAILED
			o.Err = err
		} else {
			o.Status = indexerv1.ExtractorRunStatus_EXTRACTOR_RUN_STATUS_SUCCEEDED
			for i := range exs {
				exs[i].Extractor = o.Extractor
				exs[i].SchemaVersion = o.SchemaVersion
			}
			o.Extracts = exs
		}
		out = append(out, o)
	}
	return out
}

func safeCanHandle(ex Extractor, doc *Document) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = true // let Extract run and fail visibly
		}
	}()
	return ex.CanHandle(doc)
}

func runOne(ctx context.Context, ex Extractor, doc *Document, timeout time.Duration) (exs []Extract, err error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("extractor %s panicked: %v\n%s", ex.Name(), r, debug.Stack())
		}
	}()
	exs, err = ex.Extract(ctx, doc)
	if err == nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("extractor %s: %w", ex.Name(), ctx.Err())
	}
	return exs, err
}
