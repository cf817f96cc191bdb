package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// PDF reads PDF attachments with Debian's poppler-utils, found on PATH at
// each use (installing the package needs no restart): pdftotext extracts
// the text layer, pdftoppm renders the first pages to PNG for vision.
// Each program runs without a shell, on a temporary copy of the bytes,
// under a time limit. A zero PDF is ready to use; it is safe for
// concurrent use.
type PDF struct {
	// Pages is how many first pages are rendered for vision (default 3).
	Pages int
	// Timeout bounds one run of one program (default 30s).
	Timeout time.Duration
	// MaxTextBytes caps the text layer kept (default 4 MiB); the rest is
	// cut, and the cut is recorded.
	MaxTextBytes int
	// Find finds a program; nil means exec.LookPath.
	Find func(name string) (string, error)
}

// pageBox is the pixel box a rendered page is scaled to fit (pdftoppm
// -scale-to): big enough to read a page's text, and bounded whatever
// size the page claims, so a page of 200 inches cannot make a
// gigapixel image.
const pageBox = 1280

// ErrPDFTool means a poppler-utils program is not installed.
var ErrPDFTool = errors.New("pipeline: poppler-utils is not installed")

// PDFText is what the text layer of a PDF holds.
type PDFText struct {
	// Text is the text layer, pages separated by blank lines.
	Text string
	// Pages is the page count (pdftotext ends each page with a form feed).
	Pages int
	// Truncated is true when the text was cut at MaxTextBytes.
	Truncated bool
}

// PDFPage is one rendered page.
type PDFPage struct {
	// Number is the page number, from 1.
	Number int
	// PNG is the image.
	PNG []byte
}

func (x *PDF) pages() int {
	if x == nil || x.Pages <= 0 {
		return 3
	}
	return x.Pages
}

func (x *PDF) timeout() time.Duration {
	if x == nil || x.Timeout <= 0 {
		return 30 * time.Second
	}
	return x.Timeout
}

func (x *PDF) maxText() int {
	if x == nil || x.MaxTextBytes <= 0 {
		return 4 << 20
	}
	return x.MaxTextBytes
}

func (x *PDF) find(name string) (string, error) {
	find := exec.LookPath
	if x != nil && x.Find != nil {
		find = x.Find
	}
	p, err := find(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s not found (%v)", ErrPDFTool, name, err)
	}
	return p, nil
}

// Tools returns where pdftotext and pdftoppm are, or ErrPDFTool naming
// the first one missing: without them PDFs are kept and listed, unread.
func (x *PDF) Tools() (pdftotext, pdftoppm string, err error) {
	if pdftotext, err = x.find("pdftotext"); err != nil {
		return "", "", err
	}
	if pdftoppm, err = x.find("pdftoppm"); err != nil {
		return "", "", err
	}
	return pdftotext, pdftoppm, nil
}

// Text extracts the text layer of data with pdftotext (UTF-8, Unix line
// ends). A PDF poppler cannot read is an error naming what pdftotext said;
// a PDF without a text layer (a scan) is an empty text, not an error.
func (x *PDF) Text(ctx context.Context, data []byte) (PDFText, error) {
	var out PDFText
	bin, dir, file, err := x.prepare("pdftotext", data)
	if err != nil {
		return out, err
	}
	defer os.RemoveAll(dir)
	stdout := &capped{max: x.maxText()}
	if err := x.run(ctx, stdout, bin, "-enc", "UTF-8", "-eol", "unix", file, "-"); err != nil {
		return out, err
	}
	text := strings.ToValidUTF8(string(stdout.buf), "")
	out.Truncated = stdout.dropped
	out.Pages = strings.Count(text, "\f")
	if !out.Truncated && out.Pages == 0 && strings.TrimSpace(text) != "" {
		out.Pages = 1
	}
	var pages []string
	for pg := range strings.SplitSeq(text, "\f") {
		if pg = strings.TrimSpace(pg); pg != "" {
			pages = append(pages, pg)
		}
	}
	out.Text = strings.Join(pages, "\n\n")
	return out, nil
}

// Render renders the first Pages pages of data to PNG with pdftoppm,
// each scaled to fit a 1280-pixel box, in page order. A PDF with fewer
// pages renders them all.
func (x *PDF) Render(ctx context.Context, data []byte) ([]PDFPage, error) {
	bin, dir, file, err := x.prepare("pdftoppm", data)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	prefix := filepath.Join(dir, "page")
	if err := x.run(ctx, &capped{}, bin, "-png", "-scale-to", strconv.Itoa(pageBox),
		"-f", "1", "-l", strconv.Itoa(x.pages()), file, prefix); err != nil {
		return nil, err
	}
	// pdftoppm names pages page-1.png, or page-01.png, page-001.png as
	// the page count needs digits: the number is what follows the dash.
	names, err := filepath.Glob(prefix + "-*.png")
	if err != nil {
		return nil, err
	}
	var pages []PDFPage
	for _, name := range names {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(name), "page-"), ".png"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		pages = append(pages, PDFPage{Number: n, PNG: b})
	}
	slices.SortFunc(pages, func(a, b PDFPage) int { return a.Number - b.Number })
	if len(pages) == 0 {
		return nil, errors.New("pdftoppm rendered no page")
	}
	return pages, nil
}

// errPDFBudget is a PDF left unread, or stopped, because the PDFs before
// it spent the time its intake gives PDFs.
var errPDFBudget = errors.New("the intake's time for reading PDFs (two thirds of its call's) was spent")

// run runs bin with args under the time limit, stdout to out; its error
// carries the end of what the program wrote to stderr.
func (x *PDF) run(parent context.Context, out *capped, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(parent, x.timeout())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr := &capped{max: 2048}
	cmd.Stdout, cmd.Stderr = out, stderr
	// A program killed at the deadline may leave a child holding the
	// pipes; do not wait for it forever.
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	switch {
	case err == nil:
		return nil
	case errors.Is(parent.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s: stopped: %w", filepath.Base(bin), errPDFBudget)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: no result within %s", filepath.Base(bin), x.timeout())
	}
	// poppler's exit codes (pdftotext(1)): 1 the PDF cannot be opened,
	// 3 its permissions forbid it (encrypted); stderr says why, a line
	// per problem, often repeated.
	what := err.Error()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch ee.ExitCode() {
		case 1:
			what = "cannot open the PDF"
		case 3:
			what = "the PDF's permissions forbid it"
		}
	}
	// poppler's messages quote what the PDF holds (font and object
	// names) in its bytes, and the cap may cut a character: the error
	// is kept in protobuf strings, so it is made UTF-8. They also name
	// the files in the run's temporary directory, which are this
	// server's business: the names are kept, the directory left out.
	text := utf8x.Valid(string(stderr.buf))
	for _, a := range args {
		if filepath.IsAbs(a) {
			text = strings.ReplaceAll(text, filepath.Dir(a)+string(filepath.Separator), "")
		}
	}
	var lines []string
	for l := range strings.Lines(text) {
		if l = strings.TrimSpace(l); l != "" && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > 0 {
		what += " (" + strings.Join(lines, "; ") + ")"
	}
	return fmt.Errorf("%s: %s", filepath.Base(bin), what)
}

// prepare finds tool and writes data to a file of a new temporary
// directory, which the caller removes.
func (x *PDF) prepare(tool string, data []byte) (bin, dir, file string, err error) {
	if bin, err = x.find(tool); err != nil {
		return "", "", "", err
	}
	if dir, err = os.MkdirTemp("", "agentmesh-pdf-"); err != nil {
		return "", "", "", err
	}
	file = filepath.Join(dir, "in.pdf")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		os.RemoveAll(dir)
		return "", "", "", err
	}
	return bin, dir, file, nil
}

// capped keeps the first max bytes written to it (none when max is 0)
// and drops the rest, so a program's output cannot fill the memory.
type capped struct {
	max     int
	buf     []byte
	dropped bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - len(c.buf)
	if room < len(p) {
		c.dropped = c.dropped || len(p) > 0 && c.max > 0
		if room > 0 {
			c.buf = append(c.buf, p[:room]...)
		}
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// readPDF reads one PDF attachment for the pipeline: its text layer, and
// its first pages rendered for vision when render is true. It returns
// the attachment's note and the errors to record; a missing program or an
// unreadable PDF leaves the attachment kept and listed.
func (q *Qualifier) readPDF(ctx context.Context, a Attachment, render bool) (text PDFText, pages []PDFPage, note string, errs []string) {
	text, err := q.PDF.Text(ctx, a.Data)
	if err != nil {
		if errors.Is(err, ErrPDFTool) {
			return PDFText{}, nil, "PDF kept and listed, not read: " + err.Error(), []string{a.Name + ": " + err.Error()}
		}
		return PDFText{}, nil, "PDF kept and listed, unreadable: " + err.Error(), []string{a.Name + ": " + err.Error()}
	}
	var parts []string
	switch {
	case text.Text == "":
		parts = append(parts, fmt.Sprintf("PDF of %d pages without a text layer", text.Pages))
	case text.Truncated:
		parts = append(parts, fmt.Sprintf("text layer read (%d bytes, cut at the limit)", len(text.Text)))
		errs = append(errs, fmt.Sprintf("%s: text layer cut at %d bytes", a.Name, q.PDF.maxText()))
	default:
		parts = append(parts, fmt.Sprintf("PDF of %d pages: text layer read (%d characters)", text.Pages, len([]rune(text.Text))))
	}
	if render {
		pages, err = q.PDF.Render(ctx, a.Data)
		if err != nil {
			parts = append(parts, "pages not rendered: "+err.Error())
			errs = append(errs, a.Name+": "+err.Error())
		} else {
			parts = append(parts, fmt.Sprintf("pages 1-%d rendered for vision", pages[len(pages)-1].Number))
		}
	}
	return text, pages, strings.Join(parts, "; "), errs
}

// pdfPageName names a rendered page for vision; pdfOf reads it back.
func pdfPageName(pdf string, n int) string { return fmt.Sprintf("%s#page=%d", pdf, n) }

func pdfOf(image string) (pdf string, page int, ok bool) {
	name, num, found := strings.Cut(image, "#page=")
	if !found {
		return "", 0, false
	}
	n, err := strconv.Atoi(num)
	return name, n, err == nil
}
