package pipeline

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/text/encoding/htmlindex"
	"google.golang.org/protobuf/types/known/timestamppb"

	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Attachment is a file that came with a document, or inside its e-mail.
type Attachment struct {
	Name, MimeType string
	Data           []byte
}

// Email is an RFC 5322 message taken apart: its extraction (headers and
// the cleaned body), the full body text, and the attachments it carried.
type Email struct {
	Extraction *indexerv1.EmailExtraction
	// Text is the decoded body, quoted replies included.
	Text string
	// Attachments are the MIME parts that are not the body.
	Attachments []Attachment
}

// ErrNotEmail means the text is not an RFC 5322 message: no header block
// with a From field and a To or Subject field.
var ErrNotEmail = errors.New("pipeline: not an RFC 5322 message")

// maxMIMEDepth bounds nested multiparts and forwarded messages (a
// message/rfc822 in a multipart/mixed in ...), so a hostile message cannot
// recurse for long: a forwarded message is parsed one level down, and one
// past the bound is kept as an attachment. (Parsed from the top again, 6,000
// forwards in 408 KB took the mesh to 1.9 GB.)
const maxMIMEDepth = 8

// Bounds of what an e-mail's headers give the extraction (and so the
// document, its events and the graph): a subject, an address, a message
// id or a reference is cut at maxHeaderText bytes; To and Cc keep their
// first maxRecipients addresses each, References its first maxReferences.
// A 600 KB subject made intake events NATS would not carry, a 7 MB one a
// document MongoDB would not store (500), and 500,000 recipients an
// extraction that ran for 16 minutes.
const (
	maxHeaderText  = 2 << 10
	maxRecipients  = 500
	maxReferences  = 100
	maxAddressList = maxRecipients * 512 // bytes of a To or Cc field parsed
)

// wordDecoder decodes RFC 2047 encoded words in any charset charsetReader
// knows.
var wordDecoder = mime.WordDecoder{CharsetReader: charsetReader}

// charsetReader decodes text in charset to UTF-8. Charsets are looked up
// by their WHATWG Encoding Standard labels, which are what mail clients
// write ("iso-8859-2", "windows-1250", "shift_jis"…; "iso-8859-1" and
// "us-ascii" read as windows-1252, a superset).
func charsetReader(charset string, in io.Reader) (io.Reader, error) {
	enc, err := htmlindex.Get(charset)
	if err != nil {
		return nil, fmt.Errorf("unknown charset %q", charset)
	}
	return enc.NewDecoder().Reader(in), nil
}

// toUTF8 decodes a text part in charset; UTF-8, an unknown charset or
// none keep the bytes as they are (made valid UTF-8 later).
func toUTF8(charset string, data []byte) []byte {
	c := strings.ToLower(strings.TrimSpace(charset))
	if c == "" || c == "utf-8" || c == "utf8" {
		return data
	}
	r, err := charsetReader(c, bytes.NewReader(data))
	if err != nil {
		return data
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return data
	}
	return out
}

// ParseEmail parses raw as an RFC 5322 message with MIME parts (net/mail,
// mime/multipart): headers, the text/plain body (text/html stripped of
// tags when there is no plain part), transfer encodings (base64,
// quoted-printable), RFC 2047 encoded headers, and attachments. It
// returns ErrNotEmail when raw does not start with a header block naming
// a sender and a recipient or subject, and another error when the
// message is broken (a multipart without its boundary, bad base64).
func ParseEmail(raw string) (*Email, error) {
	return parseEmail(raw, 0)
}

// parseEmail is ParseEmail for a message depth levels down (forwarded).
func parseEmail(raw string, depth int) (*Email, error) {
	msg, err := mail.ReadMessage(strings.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotEmail, err)
	}
	h := msg.Header
	if h.Get("From") == "" || (h.Get("To") == "" && h.Get("Subject") == "") {
		return nil, ErrNotEmail
	}
	body, err := io.ReadAll(msg.Body)
	if err != nil {
		return nil, fmt.Errorf("pipeline: e-mail body: %w", err)
	}
	var p mimeParts
	if err := p.walk(h, body, depth); err != nil {
		return nil, fmt.Errorf("pipeline: e-mail MIME structure: %w", err)
	}
	text := p.plain
	if text == "" {
		text = stripTags(p.html)
	}
	text = strings.ToValidUTF8(strings.ReplaceAll(text, "\r\n", "\n"), "")
	subject := headerText(decodeHeader(h.Get("Subject")))
	ex := &indexerv1.EmailExtraction{
		From:      headerText(strings.Join(addresses(h.Get("From")), ", ")),
		To:        addresses(h.Get("To")),
		Cc:        addresses(h.Get("Cc")),
		Subject:   subject,
		MessageId: headerText(strings.ToValidUTF8(strings.Trim(h.Get("Message-Id"), "<> "), "")),
		Thread:    ThreadSubject(subject),
		Body:      CleanEmailBody(text),
	}
	if d, err := h.Date(); err == nil {
		ex.Date = timestamppb.New(d)
	}
	for _, ref := range strings.Fields(strings.ToValidUTF8(h.Get("References")+" "+h.Get("In-Reply-To"), "")) {
		ref = headerText(strings.Trim(ref, "<>"))
		if ref != "" && !slices.Contains(ex.References, ref) {
			ex.References = append(ex.References, ref)
			if len(ex.References) == maxReferences {
				break
			}
		}
	}
	return &Email{Extraction: ex, Text: text, Attachments: p.attachments}, nil
}

// mimeParts collects the body texts and attachments of a message.
type mimeParts struct {
	plain, html string
	attachments []Attachment
}

// walk reads one entity (headers h, raw body) and, for a multipart, each
// of its parts.
func (p *mimeParts) walk(h map[string][]string, body []byte, depth int) error {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	ctype := get("Content-Type")
	if ctype == "" {
		ctype = "text/plain"
	}
	media, params, err := mime.ParseMediaType(ctype)
	if err != nil {
		media, params = "application/octet-stream", nil
	}
	if strings.HasPrefix(media, "multipart/") {
		if depth >= maxMIMEDepth {
			return fmt.Errorf("multiparts nested deeper than %d", maxMIMEDepth)
		}
		boundary := params["boundary"]
		if boundary == "" {
			return fmt.Errorf("%s without a boundary", media)
		}
		mr := multipart.NewReader(bytes.NewReader(body), boundary)
		parts := 0
		for {
			part, err := mr.NextRawPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return err
			}
			data, err := io.ReadAll(part)
			if err != nil {
				return err
			}
			if err := p.walk(part.Header, data, depth+1); err != nil {
				return err
			}
			parts++
		}
		if parts == 0 {
			return fmt.Errorf("%s has no parts (boundary %q not found)", media, boundary)
		}
		return nil
	}
	data, err := decodeTransfer(get("Content-Transfer-Encoding"), body)
	if err != nil {
		return err
	}
	disp, dparams, _ := mime.ParseMediaType(get("Content-Disposition"))
	name := headerText(decodeHeader(dparams["filename"]))
	if name == "" {
		name = headerText(decodeHeader(params["name"]))
	}
	if media == "message/rfc822" && depth < maxMIMEDepth {
		// A forwarded message: its own text and attachments count too.
		if inner, err := parseEmail(string(data), depth+1); err == nil {
			p.plain = joinText(p.plain, inner.Text)
			p.attachments = append(p.attachments, inner.Attachments...)
			return nil
		}
	}
	switch {
	case disp != "attachment" && name == "" && media == "text/plain":
		p.plain = joinText(p.plain, string(toUTF8(params["charset"], data)))
	case disp != "attachment" && name == "" && media == "text/html":
		p.html = joinText(p.html, string(toUTF8(params["charset"], data)))
	default:
		if name == "" {
			name = fmt.Sprintf("part-%d", len(p.attachments)+1)
		}
		p.attachments = append(p.attachments, Attachment{Name: name, MimeType: media, Data: data})
	}
	return nil
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n\n" + b
}

// decodeTransfer undoes a Content-Transfer-Encoding (RFC 2045 §6).
func decodeTransfer(enc string, body []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(enc)) {
	case "base64":
		// Line breaks (and any other white space) are not part of the data.
		clean := bytes.Map(func(r rune) rune {
			if r == '\r' || r == '\n' || r == ' ' || r == '\t' {
				return -1
			}
			return r
		}, body)
		out := make([]byte, base64.StdEncoding.DecodedLen(len(clean)))
		n, err := base64.StdEncoding.Decode(out, clean)
		if err != nil {
			return nil, fmt.Errorf("base64 part: %w", err)
		}
		return out[:n], nil
	case "quoted-printable":
		out, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
		if err != nil {
			return nil, fmt.Errorf("quoted-printable part: %w", err)
		}
		return out, nil
	}
	return body, nil
}

func decodeHeader(s string) string {
	d, err := wordDecoder.DecodeHeader(s)
	if err != nil {
		return strings.ToValidUTF8(s, "")
	}
	return strings.ToValidUTF8(d, "")
}

// headerText is s cut at maxHeaderText bytes, on a character boundary.
func headerText(s string) string { return utf8x.Prefix(s, maxHeaderText) }

// addresses parses an address list, its first maxRecipients addresses
// (each cut at maxHeaderText); a list that does not parse is split at
// commas as written. Only the first maxAddressList bytes of the field are
// read, cut at a comma.
func addresses(field string) []string {
	if strings.TrimSpace(field) == "" {
		return nil
	}
	if len(field) > maxAddressList {
		field = field[:maxAddressList]
		if i := strings.LastIndexByte(field, ','); i > 0 {
			field = field[:i]
		}
	}
	list, err := (&mail.AddressParser{WordDecoder: &wordDecoder}).ParseList(field)
	if err != nil {
		var out []string
		for _, a := range strings.Split(field, ",") {
			if a = strings.TrimSpace(a); a != "" {
				out = append(out, headerText(decodeHeader(a)))
			}
			if len(out) == maxRecipients {
				break
			}
		}
		return out
	}
	list = list[:min(len(list), maxRecipients)]
	out := make([]string, len(list))
	for i, a := range list {
		// An encoded word's bytes are taken as its charset says: a name
		// in Latin-1 labelled UTF-8 (=?UTF-8?Q?Caf=E9?=, common in real
		// mail) decodes to invalid UTF-8, which no protobuf string takes.
		name, addr := strings.ToValidUTF8(a.Name, ""), strings.ToValidUTF8(a.Address, "")
		out[i] = addr
		if name != "" {
			out[i] = name + " <" + addr + ">"
		}
		out[i] = headerText(out[i])
	}
	return out
}

var (
	replyPrefix = regexp.MustCompile(`(?i)^\s*((re|fw|fwd|aw|sv|wg)(\[\d+\])?\s*:\s*)+`)
	// Lines that start the quoted message of a reply: Gmail/Apple's
	// attribution, Outlook's separator and header block.
	quoteStart = regexp.MustCompile(`(?im)^(on\s.{1,200}\swrote:\s*$|-{2,}\s*original message\s*-{2,}\s*$|_{10,}\s*$|from:\s.+\n(sent|date):\s)`)
	tagRe      = regexp.MustCompile(`(?s)<(script|style)\b.*?</(script|style)>|<[^>]*>`)
)

// ThreadSubject is the subject without reply and forward prefixes, which
// names the thread a message belongs to.
func ThreadSubject(subject string) string {
	return strings.TrimSpace(replyPrefix.ReplaceAllString(subject, ""))
}

// CleanEmailBody returns what the sender wrote: the text before the
// quoted message of a reply, without ">"-quoted lines, and without the
// signature (after the "-- " delimiter of RFC 3676 §4.3).
func CleanEmailBody(text string) string {
	if loc := quoteStart.FindStringIndex(text); loc != nil {
		text = text[:loc[0]]
	}
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimRight(l, " \r") == "--" {
			break
		}
		if strings.HasPrefix(strings.TrimSpace(l), ">") {
			continue
		}
		out = append(out, strings.TrimRight(l, " \r"))
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

func stripTags(html string) string {
	s := tagRe.ReplaceAllString(html, " ")
	for _, r := range [][2]string{{"&nbsp;", " "}, {"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", `"`}, {"&#39;", "'"}} {
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	var lines []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "\n")
}
