// Package pdftest writes small, valid PDF files for tests, so that no test
// depends on a binary fixture nobody can regenerate.
package pdftest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireTools skips t outside CI when poppler-utils (pdftotext,
// pdftoppm) is not installed; in CI, which .ci/run gives poppler-utils,
// it fails t, so a PDF test cannot pass by not running.
func RequireTools(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"pdftotext", "pdftoppm"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s not found, and CI is set: .ci/run installs poppler-utils", tool)
			}
			t.Skipf("%s not found: install poppler-utils (Debian package) to run the PDF tests", tool)
		}
	}
}

// PDF returns a PDF 1.4 file of len(pages) US Letter pages, each showing
// its text (ASCII; one line per "\n") in Helvetica, with a correct
// cross-reference table, so poppler reads it without repairing it.
func PDF(pages ...string) []byte {
	var b bytes.Buffer
	var offsets []int
	obj := func(body string) {
		offsets = append(offsets, b.Len())
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", len(offsets), body)
	}
	b.WriteString("%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
	// Objects 1 catalog, 2 page tree, 3 font, then per page its page
	// object (4+2i) and content stream (5+2i).
	kids := make([]string, len(pages))
	for i := range pages {
		kids[i] = fmt.Sprintf("%d 0 R", 4+2*i)
	}
	obj("<< /Type /Catalog /Pages 2 0 R >>")
	obj(fmt.Sprintf("<< /Type /Pages /Kids [%s] /Count %d >>", strings.Join(kids, " "), len(pages)))
	obj("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
	for i, text := range pages {
		obj(fmt.Sprintf("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>", 5+2*i))
		var c strings.Builder
		c.WriteString("BT /F1 14 Tf 18 TL 72 720 Td\n")
		for _, line := range strings.Split(text, "\n") {
			fmt.Fprintf(&c, "(%s) Tj T*\n", escape(line))
		}
		c.WriteString("ET")
		obj(fmt.Sprintf("<< /Length %d >>\nstream\n%s\nendstream", c.Len(), c.String()))
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(offsets)+1)
	for _, o := range offsets {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(offsets)+1, xref)
	return b.Bytes()
}

// escape escapes a PDF literal string's delimiters.
func escape(s string) string {
	return strings.NewReplacer(`\`, `\\`, "(", `\(`, ")", `\)`).Replace(s)
}
