package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/status"

	"github.com/agentmesh/agentmesh/cmd/agentmesh/internal/cli/gatewayconn"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
)

// maxIngestBytes bounds a file read for ingestion: far above any text
// document, and below the gateway's body limit's order of magnitude.
const maxIngestBytes = 32 << 20

// ingestPoll is how often the pipelines of ingested files are read while
// the command waits for them.
const ingestPoll = 250 * time.Millisecond

// Statuses of one ingested file in the summary.
const (
	ingestDone       = "done"       // the pipeline finished without an error
	ingestFailed     = "failed"     // refused, or the pipeline recorded errors or failed
	ingestUnfinished = "unfinished" // still running when --wait ran out
	ingestSent       = "ingested"   // --wait 0: not followed
)

// ingestResult is one file's line of the summary (and its -o json shape).
type ingestResult struct {
	File        string   `json:"file"`
	DocumentID  string   `json:"documentId,omitempty"`
	Unchanged   bool     `json:"unchanged,omitempty"`
	ContentType string   `json:"contentType,omitempty"`
	Routing     string   `json:"routing,omitempty"`
	Chunks      int32    `json:"chunks"`
	Status      string   `json:"status"`
	Errors      []string `json:"errors,omitempty"`
}

// ingestFile is a file read for ingestion.
type ingestFile struct {
	arg  string // as named on the command line
	name string // the name it is uploaded under
	data []byte
}

func (a *app) docsIngestCmd() *cobra.Command {
	var title, typeName, sourceURL string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "ingest FILE...",
		Short: "ingest files (text, .log, .eml, PDF, PNG/JPEG/GIF/WEBP; - for stdin), one document each, and report each one's pipeline",
		Long: `Ingest files, one document each: text (.txt, .md, .log), e-mails (.eml),
PDFs and images (PNG, JPEG, GIF, WEBP). Through the gateway each file goes
to POST /v1/documents:upload, which judges it by its bytes; with --grpc only
text files can be sent. The command then follows each document's intake
pipeline (up to --wait) and prints a summary per file: content type,
routing, chunks and errors. It exits 1 when any file failed.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s takes one or more file names (or -)", cmd.CommandPath())
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context, _ *cobra.Command, args []string, m *mesh) error {
			st, err := parseEnum(indexerv1.SourceType(0).Descriptor(), "--type", typeName)
			if err != nil {
				return err
			}
			if len(args) > 1 && title != "" {
				return usagef("--title names one document: give one file, or leave --title out (each file's name is its title)")
			}
			files, err := a.readIngestFiles(args, title)
			if err != nil {
				return err
			}
			if m.gateway == nil {
				for _, f := range files {
					if ct := http.DetectContentType(f.data); !strings.HasPrefix(ct, "text/") {
						return usagef("%s is %s: over --grpc only text can be ingested; send it through the gateway (without --grpc)", f.arg, ct)
					}
				}
			}
			prog := newCounter(a.io.Err, len(files), "files sent")
			results := make([]ingestResult, len(files))
			for i, f := range files {
				prog.note(fmt.Sprintf("sending %s (%d bytes)", f.arg, len(f.data)))
				res, err := ingestOne(ctx, m, f, indexerv1.SourceType(st), title, sourceURL)
				results[i] = ingestResult{File: f.arg, Status: ingestSent}
				if err != nil {
					if ctx.Err() != nil {
						return callErr("ingest "+f.arg, err)
					}
					results[i].Status = ingestFailed
					results[i].Errors = []string{errorText(callErr("ingest", err))}
				} else {
					results[i].DocumentID, results[i].Unchanged = res.GetDocument().GetId(), res.GetUnchanged()
					describe(&results[i], res.GetDocument())
					if wait == 0 && results[i].Status == ingestUnfinished {
						results[i].Status = ingestSent // not followed: neither done nor failed
					}
				}
				prog.add(1)
			}
			prog.finish()
			if wait > 0 {
				if err := a.follow(ctx, m, results, wait); err != nil {
					return err
				}
			}
			if err := a.emit(map[string]any{"files": results}, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "FILE\tDOCUMENT\tTYPE\tROUTING\tCHUNKS\tSTATUS\tERRORS")
				for _, r := range results {
					errs := "-"
					if len(r.Errors) > 0 {
						errs = fmt.Sprintf("%d: %s", len(r.Errors), clip(r.Errors[0], 80))
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.File, dash(r.DocumentID), dash(r.ContentType), dash(r.Routing), r.Chunks, r.Status, errs)
				}
			}); err != nil {
				return err
			}
			failed := 0
			for _, r := range results {
				if r.Status == ingestFailed || r.Status == ingestUnfinished {
					failed++
				}
			}
			if failed > 0 {
				return &exitError{code: ExitFailure, err: fmt.Errorf("%d of %d files failed or did not finish (see the table above)", failed, len(results))}
			}
			return nil
		}),
	}
	f := c.Flags()
	f.StringVar(&title, "title", "", "title of a single file's document (default: the file name)")
	f.StringVar(&typeName, "type", "", "source type: email, ticket, wiki, log, report, other (default: .eml email, .log log, else other)")
	f.StringVar(&sourceURL, "source-url", "", "where the documents come from")
	f.DurationVar(&wait, "wait", 2*time.Minute, "how long to follow the documents' intake pipelines (0: do not follow)")
	return c
}

// readIngestFiles reads every file before anything is sent, so a typo in
// the last name ingests nothing.
func (a *app) readIngestFiles(args []string, title string) ([]ingestFile, error) {
	var files []ingestFile
	for _, arg := range args {
		f := ingestFile{arg: arg, name: filepath.Base(arg)}
		var r io.Reader
		if arg == "-" {
			if len(args) > 1 {
				return nil, usagef("- (stdin) is a document of its own: give it alone")
			}
			r, f.name = a.io.In, "stdin.txt"
			if title != "" && filepath.Ext(title) != "" {
				f.name = title
			}
		} else {
			file, err := os.Open(arg)
			if err != nil {
				return nil, usagef("%v", err)
			}
			defer file.Close()
			r = file
		}
		data, err := io.ReadAll(io.LimitReader(r, maxIngestBytes+1))
		if err != nil {
			return nil, usagef("reading %s: %v", arg, err)
		}
		if len(data) > maxIngestBytes {
			return nil, usagef("%s is larger than %d MiB", arg, maxIngestBytes>>20)
		}
		f.data = data
		files = append(files, f)
	}
	return files, nil
}

// ingestOne sends one file: through the gateway's multipart upload, which
// takes every kind of file; over gRPC as the text of an IngestDocument call
// (the command has checked that it is text).
func ingestOne(ctx context.Context, m *mesh, f ingestFile, st indexerv1.SourceType, title, sourceURL string) (*indexerv1.IngestDocumentResponse, error) {
	res := &indexerv1.IngestDocumentResponse{}
	if m.gateway != nil {
		fields := map[string]string{"title": title, "source_url": sourceURL}
		if st != 0 {
			fields["source_type"] = st.String()
		}
		return res, m.gateway.Upload(ctx, []gatewayconn.File{{Name: f.name, Data: f.data}}, fields, res)
	}
	if st == 0 {
		st = indexerv1.SourceType_SOURCE_TYPE_OTHER
		switch strings.ToLower(filepath.Ext(f.name)) {
		case ".eml":
			st = indexerv1.SourceType_SOURCE_TYPE_EMAIL
		case ".log":
			st = indexerv1.SourceType_SOURCE_TYPE_LOG
		}
	}
	if title == "" {
		title = f.name
	}
	return docsClient(m).IngestDocument(ctx, &indexerv1.IngestDocumentRequest{Scope: m.scope(), SourceType: st, Title: title, SourceUrl: sourceURL, RawContent: string(f.data)})
}

// follow reads the documents until every pipeline finished or wait ran
// out, drawing how many finished.
func (a *app) follow(ctx context.Context, m *mesh, results []ingestResult, wait time.Duration) error {
	open := 0
	for _, r := range results {
		if r.Status == ingestUnfinished {
			open++
		}
	}
	prog := newCounter(a.io.Err, open, "pipelines finished")
	prog.noteless = true
	defer prog.finish()
	deadline := time.Now().Add(wait)
	tick := time.NewTicker(ingestPoll)
	defer tick.Stop()
	for {
		pending := 0
		for i := range results {
			r := &results[i]
			if r.Status != ingestUnfinished {
				continue
			}
			res, err := docsClient(m).GetDocument(ctx, &indexerv1.GetDocumentRequest{Scope: m.scope(), DocumentId: r.DocumentID})
			if err != nil {
				if ctx.Err() != nil {
					return callErr("get document "+r.DocumentID, err)
				}
				r.Status, r.Errors = ingestFailed, append(r.Errors, errorText(callErr("get document", err)))
				prog.add(1)
				continue
			}
			describe(r, res.GetDocument())
			if r.Status == ingestUnfinished {
				pending++
			} else {
				prog.add(1)
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			return nil
		}
		prog.draw()
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-tick.C:
		}
	}
}

// describe fills r from the document's intake pipeline: its content
// type, routing, chunks and errors; done, failed or still unfinished.
func describe(r *ingestResult, d *indexerv1.Document) {
	p := d.GetPipeline()
	r.Routing, r.Chunks = enumName(d.GetRouting()), d.GetChunkCount()
	if r.Routing == "unspecified" {
		r.Routing = ""
	}
	r.ContentType = d.GetContentType()
	if t := p.GetContentType().GetType(); t != 0 {
		r.ContentType = enumName(t)
	}
	r.Errors = r.Errors[:0]
	for _, ph := range p.GetPhases() {
		for _, e := range ph.GetErrors() {
			r.Errors = append(r.Errors, ph.GetName()+": "+e)
		}
	}
	for _, e := range p.GetIndexing().GetErrors() {
		r.Errors = append(r.Errors, "indexing: "+e)
	}
	switch s := d.GetExtractionStatus(); {
	case s == indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_FAILED || s == indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_PARTIALLY_FAILED:
		r.Status = ingestFailed
		if len(r.Errors) == 0 {
			r.Errors = append(r.Errors, "extraction "+enumName(s))
		}
	case !p.GetFinished() && s != indexerv1.ExtractionJobStatus_EXTRACTION_JOB_STATUS_SUCCEEDED:
		r.Status = ingestUnfinished
	case len(r.Errors) > 0:
		r.Status = ingestFailed
	default:
		r.Status = ingestDone
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
