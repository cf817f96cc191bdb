package pipeline_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/services/indexer/internal/contenttype"
	"github.com/agentmesh/agentmesh/services/indexer/internal/pipeline"
)

// FuzzReaders feeds uploaded text to what reads it at intake: the e-mail
// parser (headers, MIME parts, encodings, charsets), content-type
// detection, and the Jira, Confluence and log field readers. None may
// panic, each answers in time, and what they return is valid UTF-8 (it is
// stored and sent as protobuf strings, which must be).
func FuzzReaders(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "testdata", "qualifier", "*"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil && len(b) < 64<<10 {
			f.Add(string(b))
		}
	}
	f.Add("From: a@b.c\nTo: d@e.f\nContent-Type: multipart/mixed; boundary=x\n\n--x\nContent-Type: message/rfc822\n\nFrom: a@b.c\nSubject: s\n\nbody\n--x--\n")
	f.Add("From: =?utf-16?b?//5hAA==?=\nSubject: =?iso-8859-1?q?caf=E9?=\nContent-Type: text/html; charset=windows-1252\nContent-Transfer-Encoding: quoted-printable\n\n<p>caf=E9</p>\n")
	f.Fuzz(func(t *testing.T, text string) {
		start := time.Now()
		if e, err := pipeline.ParseEmail(text); err == nil {
			ex := e.Extraction
			fields := []string{e.Text, ex.GetFrom(), ex.GetSubject(), ex.GetBody(), ex.GetThread(), ex.GetMessageId()}
			fields = append(append(append(fields, ex.GetTo()...), ex.GetCc()...), ex.GetReferences()...)
			for _, a := range e.Attachments {
				fields = append(fields, a.Name, a.MimeType)
			}
			for _, s := range fields {
				if !utf8.ValidString(s) {
					t.Fatalf("ParseEmail(%q): a field is not valid UTF-8: %q", text, s)
				}
			}
		}
		for _, src := range []indexerv1.SourceType{indexerv1.SourceType_SOURCE_TYPE_UNSPECIFIED, indexerv1.SourceType_SOURCE_TYPE_EMAIL} {
			contenttype.Detect("title", text, src)
		}
		pipeline.ParseJira("PROJ-1 title", text)
		pipeline.ParseConfluence("Page", text)
		pipeline.ParseLog(text)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("%d bytes took %v to read", len(text), d)
		}
	})
}
