package analysis

import (
	"bytes"
	"image"
	"image/png"
	"slices"
	"strings"
	"testing"
)

func TestAdmit(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, 2, 2))); err != nil {
		t.Fatal(err)
	}
	pngBytes := buf.Bytes()
	cases := []struct {
		name     string
		img      Image
		wantMIME string
		skipped  string
	}{
		{"png", Image{Data: pngBytes, MIMEType: "image/png"}, "image/png", ""},
		{"mixed case with parameters", Image{Data: pngBytes, MIMEType: " Image/PNG ; q=1"}, "image/png", ""},
		{"declared as another image type", Image{Data: pngBytes, MIMEType: "image/webp"}, "image/png", ""},
		{"text declared as an image", Image{Data: []byte("hello"), MIMEType: "image/png"}, "", "declared image/png, but the bytes look like text/plain"},
		{"sniffed", Image{Data: pngBytes}, "image/png", ""},
		{"sniffed non-image", Image{Data: []byte("%PDF-1.7 ...")}, "", "bytes look like application/pdf"},
		{"pdf", Image{Data: []byte("%PDF"), MIMEType: "application/pdf"}, "", "not an image (application/pdf)"},
		{"svg", Image{Data: []byte("<svg/>"), MIMEType: "image/svg+xml"}, "", "vector image"},
		{"empty", Image{MIMEType: "image/png"}, "", "empty"},
		{"too large", Image{Data: append(slices.Clip(pngBytes), bytes.Repeat([]byte{1}, 101-len(pngBytes))...), MIMEType: "image/png"}, "", "too large: 101 bytes, over the limit of 100 bytes"},
		{"at the limit", Image{Data: append(slices.Clip(pngBytes), bytes.Repeat([]byte{1}, 100-len(pngBytes))...), MIMEType: "image/png"}, "image/png", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mime, skipped := admit(tc.img, 100)
			if mime != tc.wantMIME || (tc.skipped == "") != (skipped == "") || !strings.Contains(skipped, tc.skipped) {
				t.Errorf("admit = (%q, %q), want (%q, containing %q)", mime, skipped, tc.wantMIME, tc.skipped)
			}
		})
	}
}

func TestDetailsParseMergeRender(t *testing.T) {
	t.Parallel()
	wiki := kinds[Wiki]
	a, err := wiki.parse(`{"page_title":" Runbook ","author":"","headings":["Intro","Intro"," ","Steps"]}`)
	if err != nil {
		t.Fatal(err)
	}
	// Lenient where the schema was not met: a list as one string.
	b, err := wiki.parse(`{"page_title":"Runbook","author":"Dana","headings":"Rollback"}`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		d    details
		want string
	}{
		{"one image, duplicates and blanks dropped", a, "Page title: Runbook\nHeadings:\n- Intro\n- Steps"},
		{"merged in order of first appearance", merge([]details{a, b}), "Page title: Runbook\nAuthor: Dana\nHeadings:\n- Intro\n- Steps\n- Rollback"},
		{"nothing visible", details{Values: make([][]string, 3)}, "No wiki page details visible."},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := wiki.render(tc.d); got != tc.want {
				t.Errorf("render =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
	if _, err := wiki.parse("not json"); err == nil {
		t.Error("parse accepted an answer that is not JSON")
	}
}

func TestEveryStageTwoKindHasASchemaRequiringItsFields(t *testing.T) {
	t.Parallel()
	for _, ct := range []ContentType{Email, Ticket, Wiki, Log} {
		k, ok := kinds[ct]
		if !ok {
			t.Fatalf("content type %d has no stage 2", ct)
		}
		for _, f := range k.Fields {
			if !strings.Contains(k.schema, `"`+f.Name+`"`) {
				t.Errorf("%s schema lacks %s", k.Title, f.Name)
			}
		}
		if !strings.Contains(k.schema, `"additionalProperties":false`) {
			t.Errorf("%s schema allows extra properties", k.Title)
		}
	}
	if _, ok := kinds[Generic]; ok {
		t.Error("Generic must not have a stage 2")
	}
}

func TestTruncateCountsRunes(t *testing.T) {
	t.Parallel()
	if got := truncate("žluťoučký kůň", 5); got != "žluťo […]" {
		t.Errorf("truncate = %q", got)
	}
	if got := truncate("short", 5); got != "short" {
		t.Errorf("truncate = %q, want the text unchanged", got)
	}
}
