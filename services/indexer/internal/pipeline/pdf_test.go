package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/services/indexer/internal/pdftest"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// fivePages is a PDF whose page k says "Page k of the quarterly ledger
// review" and a word no other page has.
func fivePages() ([]byte, []string) {
	words := []string{"aardvark", "bergamot", "cinnabar", "dulcimer", "escarpment"}
	pages := make([]string, len(words))
	for i, w := range words {
		pages[i] = fmt.Sprintf("Page %d of the quarterly ledger review\nKeyword %s (and a paren)", i+1, w)
	}
	return pdftest.PDF(pages...), words
}

func TestPDFTextAndPages(t *testing.T) {
	t.Parallel()
	pdftest.RequireTools(t)
	data, words := fivePages()
	ctx := context.Background()

	text, err := (&pipeline.PDF{}).Text(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if text.Pages != 5 || text.Truncated {
		t.Errorf("%d pages, truncated %v; want 5, false", text.Pages, text.Truncated)
	}
	last := -1
	for i, w := range words {
		at := strings.Index(text.Text, fmt.Sprintf("Page %d of the quarterly ledger review", i+1))
		if at <= last || !strings.Contains(text.Text, "Keyword "+w+" (and a paren)") {
			t.Errorf("page %d missing or out of order in the text layer:\n%s", i+1, text.Text)
		}
		last = at
	}
	if strings.Contains(text.Text, "\f") {
		t.Errorf("form feeds left in the text: %q", text.Text)
	}

	for _, tc := range []struct {
		name  string
		pages int
		want  int
	}{
		{"default renders the first 3", 0, 3},
		{"one page", 1, 1},
		{"more than the PDF has renders all 5", 12, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pages, err := (&pipeline.PDF{Pages: tc.pages}).Render(ctx, data)
			if err != nil {
				t.Fatal(err)
			}
			if len(pages) != tc.want {
				t.Fatalf("%d pages rendered, want %d", len(pages), tc.want)
			}
			for i, pg := range pages {
				if pg.Number != i+1 || http.DetectContentType(pg.PNG) != "image/png" {
					t.Errorf("page %d: number %d, type %s", i+1, pg.Number, http.DetectContentType(pg.PNG))
				}
			}
		})
	}

	t.Run("text cut at the limit", func(t *testing.T) {
		t.Parallel()
		text, err := (&pipeline.PDF{MaxTextBytes: 60}).Text(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		if !text.Truncated || len(text.Text) > 60 || !strings.Contains(text.Text, "Page 1") {
			t.Errorf("truncated %v, %d bytes: %q", text.Truncated, len(text.Text), text.Text)
		}
	})
}

// What poppler cannot read, and poppler missing or hanging, are errors
// that name the program; never a crash or a wait without end.
func TestPDFFailures(t *testing.T) {
	t.Parallel()
	pdftest.RequireTools(t)
	data, _ := fivePages()
	hang := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// poppler quoting the PDF's own bytes (a font name in Latin-1) past
	// the 2 KiB of its stderr kept, which cuts a character.
	latin := filepath.Join(t.TempDir(), "latin")
	if err := os.WriteFile(latin, []byte("#!/bin/sh\nprintf 'Syntax Error: Unknown font tag \\351t\\351\\n' >&2\nprintf '%0.s\\303\\251' $(seq 1100) >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	missing := func(name string) (string, error) { return "", exec.ErrNotFound }
	hanging := func(string) (string, error) { return hang, nil }
	latin1 := func(string) (string, error) { return latin, nil }
	for _, tc := range []struct {
		name string
		pdf  *pipeline.PDF
		data []byte
		want string
		tool bool // ErrPDFTool
	}{
		{"header only", &pipeline.PDF{}, []byte("%PDF-1.4\n"), "cannot open the pdf (syntax error: couldn't find trailer dictionary", false},
		{"truncated after the header", &pipeline.PDF{}, data[:len(data)/3], "cannot open the pdf (syntax error", false},
		{"not a PDF at all", &pipeline.PDF{}, []byte("hello, this is text"), "cannot open the pdf (syntax warning: may not be a pdf file", false},
		{"poppler not installed", &pipeline.PDF{Find: missing}, data, "not found", true},
		{"a run past the time limit", &pipeline.PDF{Find: hanging, Timeout: 300 * time.Millisecond}, data, "no result within 300ms", false},
		{"a message not in UTF-8", &pipeline.PDF{Find: latin1}, data, "unknown font tag \ufffdt\ufffd", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			began := time.Now()
			_, terr := tc.pdf.Text(context.Background(), tc.data)
			_, rerr := tc.pdf.Render(context.Background(), tc.data)
			if time.Since(began) > 10*time.Second {
				t.Errorf("took %s", time.Since(began))
			}
			for _, err := range []error{terr, rerr} {
				if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.want) || errors.Is(err, pipeline.ErrPDFTool) != tc.tool || !utf8.ValidString(err.Error()) {
					t.Errorf("error %v, want one containing %q (ErrPDFTool %v)", err, tc.want, tc.tool)
				}
			}
		})
	}
}

// A PDF attachment's text layer joins the text the phases read and the
// chunks; its first pages are the images vision stage 1 would get; a PDF
// poppler cannot read, or poppler missing, leaves it kept and listed with
// the reason on the attachment and the error on vision stage 1.
func TestQualifyReadsPDFAttachments(t *testing.T) {
	t.Parallel()
	pdftest.RequireTools(t)
	data, words := fivePages()
	for _, tc := range []struct {
		name      string
		pdf       *pipeline.PDF
		data      []byte
		wantText  bool
		wantNote  string
		wantError string
	}{
		{"readable", nil, data, true, "PDF of 5 pages: text layer read", ""},
		{"poppler missing", &pipeline.PDF{Find: func(string) (string, error) { return "", exec.ErrNotFound }}, data, false,
			"PDF kept and listed, not read: pipeline: poppler-utils is not installed: pdftotext not found", "report.pdf: pipeline: poppler-utils is not installed"},
		{"corrupt", nil, []byte("%PDF-1.7\n1 0 obj garbage"), false, "PDF kept and listed, unreadable: pdftotext: cannot open the PDF (", "report.pdf: pdftotext: cannot open the PDF"},
		// poppler names the files of the run's temporary directory: the
		// note keeps their names, not this server's directory.
		{"an error naming its files", &pipeline.PDF{Find: failingTool(t)}, data, false,
			"PDF kept and listed, unreadable: pdftotext: cannot open the PDF (I/O Error: Couldn't open file 'in.pdf')", "report.pdf: pdftotext: cannot open the PDF (I/O Error: Couldn't open file 'in.pdf')"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := &pipeline.Qualifier{PDF: tc.pdf}
			out := q.Qualify(context.Background(), pipeline.Input{CorrelationID: "c-1", Title: "Q3 review", Text: "Uploaded files: report.pdf",
				Attachments: []pipeline.Attachment{{Name: "report.pdf", MimeType: "application/pdf", Data: tc.data}}})
			p := out.Pipeline
			if len(p.GetAttachments()) != 1 {
				t.Fatalf("attachments %v", p.GetAttachments())
			}
			a := p.GetAttachments()[0]
			if a.GetMimeType() != "application/pdf" || !strings.HasPrefix(a.GetNote(), tc.wantNote) || a.GetSizeBytes() != int64(len(tc.data)) {
				t.Errorf("attachment %v, want the note to start %q", a, tc.wantNote)
			}
			for _, w := range words {
				if strings.Contains(out.Body, w) != tc.wantText {
					t.Errorf("body has %q: %v, want %v", w, !tc.wantText, tc.wantText)
				}
			}
			stage1 := p.GetPhases()[0]
			if stage1.GetName() != pipeline.PhaseVisionStage1 {
				t.Fatalf("first phase %s", stage1.GetName())
			}
			got := strings.Join(stage1.GetErrors(), "\n")
			if (tc.wantError == "") != (got == "") || !strings.Contains(got, tc.wantError) {
				t.Errorf("vision stage 1 errors %q, want %q", got, tc.wantError)
			}
			// Without a vision client stage 1 is skipped, but the rendered
			// pages made the PDF visual.
			if a.GetVisual() != tc.wantText || stage1.GetSkipped() != map[bool]string{true: "vision is not configured", false: "no visual attachments"}[tc.wantText] {
				t.Errorf("visual %v, stage 1 skipped %q", a.GetVisual(), stage1.GetSkipped())
			}
			// The phases after it ran on what it left.
			if len(p.GetPhases()) != 4 || p.GetExtraction().GetGeneric() == nil {
				t.Errorf("phases %v, extraction %v", p.GetPhases(), p.GetExtraction())
			}
		})
	}
}

// TestPDFToolsNamesWhatIsMissing: Tools, what the indexer's start-up log
// reports, finds both programs or names the first one missing.
func TestPDFToolsNamesWhatIsMissing(t *testing.T) {
	t.Parallel()
	only := func(have ...string) func(string) (string, error) {
		return func(name string) (string, error) {
			for _, h := range have {
				if h == name {
					return "/usr/bin/" + name, nil
				}
			}
			return "", exec.ErrNotFound
		}
	}
	for _, tc := range []struct {
		name    string
		find    func(string) (string, error)
		missing string // "" when both are found
	}{
		{"both", only("pdftotext", "pdftoppm"), ""},
		{"no pdftoppm", only("pdftotext"), "pdftoppm"},
		{"no pdftotext", only("pdftoppm"), "pdftotext"},
		{"neither", only(), "pdftotext"},
	} {
		text, render, err := (&pipeline.PDF{Find: tc.find}).Tools()
		switch {
		case tc.missing == "" && (err != nil || text != "/usr/bin/pdftotext" || render != "/usr/bin/pdftoppm"):
			t.Errorf("%s: %q, %q, %v", tc.name, text, render, err)
		case tc.missing != "" && (!errors.Is(err, pipeline.ErrPDFTool) || !strings.Contains(err.Error(), tc.missing+" not found")):
			t.Errorf("%s: error %v, want ErrPDFTool naming %s", tc.name, err, tc.missing)
		}
	}
}

// TestPDFsShareTheIntakeTime: the PDFs of an intake share two thirds of
// the time its call has left, so that PDFs that each take poppler's whole
// time limit (a compressed page that unpacks to hundreds of MB) do not run
// the intake past its deadline and fail it whole: the PDF under way when
// the share is spent is stopped, those after it are kept and listed,
// unread, each saying why, and the intake goes on.
func TestPDFsShareTheIntakeTime(t *testing.T) {
	t.Parallel()
	hang := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	q := &pipeline.Qualifier{PDF: &pipeline.PDF{Find: func(string) (string, error) { return hang, nil }, Timeout: 20 * time.Second}}
	var atts []pipeline.Attachment
	for _, name := range []string{"a.pdf", "b.pdf", "c.pdf"} {
		atts = append(atts, pipeline.Attachment{Name: name, MimeType: "application/pdf", Data: []byte("%PDF-1.4\n% " + name + "\n")})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	began := time.Now()
	out := q.Qualify(ctx, pipeline.Input{CorrelationID: "c-1", Title: "Bombs", Text: "Uploaded files: a.pdf, b.pdf, c.pdf", Attachments: atts})
	took := time.Since(began)
	if took > 2800*time.Millisecond {
		t.Errorf("the intake took %v with a 3 s deadline, want its PDFs stopped at two thirds of it", took)
	}
	notes := map[string]string{}
	for _, a := range out.Pipeline.GetAttachments() {
		notes[a.GetName()] = a.GetNote()
	}
	if n := notes["a.pdf"]; !strings.Contains(n, "stopped: the intake's time for reading PDFs") {
		t.Errorf("a.pdf, under way when the time was spent: note %q", n)
	}
	for _, name := range []string{"b.pdf", "c.pdf"} {
		if n := notes[name]; !strings.HasPrefix(n, "PDF kept and listed, not read: the intake's time for reading PDFs") {
			t.Errorf("%s, after the time was spent: note %q", name, n)
		}
	}
	if got := strings.Join(out.Pipeline.GetPhases()[0].GetErrors(), "\n"); strings.Count(got, "the intake's time for reading PDFs") != 3 {
		t.Errorf("vision stage 1 errors %q, want each PDF's", got)
	}
	t.Logf("three PDFs that hang: the intake went on after %v", took.Round(time.Millisecond))
}

// failingTool finds each poppler tool as a program of that name that fails
// as poppler does when it cannot open its input: exit code 1, naming the
// PDF it was given in full.
func failingTool(t *testing.T) func(string) (string, error) {
	dir := t.TempDir()
	script := "#!/bin/sh\nfor a; do case $a in *.pdf) f=$a;; esac; done\necho \"I/O Error: Couldn't open file '$f'\" >&2\nexit 1\n"
	for _, tool := range []string{"pdftotext", "pdftoppm", "pdfinfo"} {
		if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return func(tool string) (string, error) { return filepath.Join(dir, tool), nil }
}
