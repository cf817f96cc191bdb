package httpgateway

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	indexerv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/indexer/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// uploadPath is the multipart upload route: one or more "file" parts
// (.eml, .txt, .log, .md, .pdf, PNG/JPEG/GIF/WEBP images) and metadata
// fields become one DocumentService.IngestDocument call — text files the
// content, an .eml the raw message the indexer's e-mail parser takes,
// images and PDFs attachments. The answer is IngestDocument's.
const uploadPath = "/v1/documents:upload"

// uploadFileField is the form name of file parts.
const uploadFileField = "file"

// uploadFields are the metadata fields an upload may carry.
var uploadFields = map[string]bool{"title": true, "source_type": true, "source_urn": true, "source_url": true, "project_id": true}

// uploadFieldBytes caps one metadata field's value.
const uploadFieldBytes = 8 << 10

// multipartOverhead is what a multipart body may add to its files'
// bytes: boundaries, part headers and fields.
const multipartOverhead = 1 << 20

// Kinds of uploaded file, decided by their bytes.
const (
	kindText  = "text"
	kindEmail = "email"
	kindImage = "image"
	kindPDF   = "pdf"
)

// uploadImageTypes are the sniffed image types vision reads.
var uploadImageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// Extensions that promise a kind: a file so named must have such bytes.
var (
	textExts  = map[string]bool{".txt": true, ".log": true, ".md": true, ".markdown": true, ".eml": true}
	imageExts = map[string]bool{".png": true, ".jpg": true, ".jpeg": true, ".gif": true, ".webp": true}
)

// uploadedFile is one file part, read and classified.
type uploadedFile struct {
	name string
	data []byte
	kind string
	mime string // sniffed
}

// uploadError is a refusal of the whole upload: its HTTP status and the
// gRPC status of the body.
type uploadError struct {
	httpStatus int
	err        error
}

func (e *uploadError) Error() string { return e.err.Error() }

func badUpload(field, format string, args ...any) *uploadError {
	return &uploadError{http.StatusBadRequest, grpcx.InvalidArgument(field, format, args...)}
}

func tooLarge(format string, args ...any) *uploadError {
	return &uploadError{http.StatusRequestEntityTooLarge, grpcx.InvalidArgument(uploadFileField, format, args...)}
}

// serveUpload reads the whole multipart body, checks every file, and
// only then makes the one IngestDocument call: a refused file refuses
// the upload, and nothing of it is stored.
func (g *gateway) serveUpload(w http.ResponseWriter, r *http.Request) {
	req, files, uerr := g.readUpload(w, r)
	if uerr != nil {
		// What is left of the body is not read: close the connection, or
		// the server would wait to read it (forever, from a client that
		// stopped sending a body it was refused before any of it was read).
		w.Header().Set("Connection", "close")
		writeStatus(w, uerr.httpStatus, status.Convert(uerr.err))
		return
	}
	ctx := metadata.NewOutgoingContext(r.Context(), requestMetadata(r.Context(), r))
	res, err := indexerv1.NewDocumentServiceClient(g.backends.Indexer).IngestDocument(ctx, req)
	if err != nil {
		st := nameFile(status.Convert(err), req, files)
		httpStatus := runtime.HTTPStatusFromCode(st.Code())
		if httpStatus >= 500 {
			g.log.WarnContext(ctx, "request failed", "method", r.Method, "path", r.URL.Path, "http_status", httpStatus, "code", st.Code().String(), "error", st.Message())
		}
		writeStatus(w, httpStatus, st)
		return
	}
	b, err := jsonOptions.Marshal(res)
	if err != nil {
		writeStatus(w, http.StatusInternalServerError, status.New(codes.Internal, "encoding the response"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// readUpload reads and checks the upload and builds the request.
func (g *gateway) readUpload(w http.ResponseWriter, r *http.Request) (*indexerv1.IngestDocumentRequest, []uploadedFile, *uploadError) {
	maxTotal, maxFile := g.cfg.UploadMaxBytes, g.cfg.UploadMaxFileBytes
	// From the start, refusals included: after a refusal the server still
	// reads what is left of the body before it closes the connection.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout))
	// Its fields are parts of the body; a query parameter would be ignored,
	// so it is refused by name like an unknown parameter of any route.
	if q, err := url.ParseQuery(r.URL.RawQuery); err != nil || len(q) > 0 {
		name := "query"
		if keys := slices.Sorted(maps.Keys(q)); len(keys) > 0 {
			name = keys[0]
		}
		return nil, nil, badUpload(name, "unknown query parameter of POST %s: it takes none (send title, source_type and source_urn as multipart parts)", uploadPath)
	}
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, nil, badUpload(uploadFileField, "is required: send multipart/form-data with one or more parts named %q", uploadFileField)
	}
	if r.ContentLength > maxTotal+multipartOverhead {
		return nil, nil, tooLarge("the upload is %d bytes; its files may hold at most %d (GATEWAY_UPLOAD_MAX_BYTES)", r.ContentLength, maxTotal)
	}
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, maxTotal+multipartOverhead), params["boundary"])

	var files []uploadedFile
	fields := map[string]string{}
	var total int64
	current := "the request body" // what was being read, for errors
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, readFailure(err, current, maxTotal, g.cfg.BodyTimeout)
		}
		field := part.FormName()
		if part.FileName() == "" && field != uploadFileField {
			if !uploadFields[field] {
				return nil, nil, badUpload(field, "is not a field of an upload (files go in parts named %q; fields: title, source_type, source_urn, project_id)", uploadFileField)
			}
			if _, dup := fields[field]; dup {
				return nil, nil, badUpload(field, "is given twice")
			}
			v, err := io.ReadAll(io.LimitReader(part, uploadFieldBytes+1))
			if err != nil {
				return nil, nil, readFailure(err, "field "+field, maxTotal, g.cfg.BodyTimeout)
			}
			if len(v) > uploadFieldBytes || !utf8.Valid(v) {
				return nil, nil, badUpload(field, "must be UTF-8 text of at most %d bytes", uploadFieldBytes)
			}
			fields[field] = strings.TrimSpace(string(v))
			continue
		}
		if field != uploadFileField {
			if field == "" {
				return nil, nil, badUpload(uploadFileField, "part %d is a file without a part name: files go in parts named %q (Content-Disposition: form-data; name=%q; filename=...)",
					len(files)+len(fields)+1, uploadFileField, uploadFileField)
			}
			return nil, nil, badUpload(field, "is a file part: files go in parts named %q", uploadFileField)
		}
		raw := part.FileName()
		if len(raw) > maxFileName {
			return nil, nil, badUpload(uploadFileField, "part %d's file name is %d bytes; at most %d", len(files)+1, len(raw), maxFileName)
		}
		name := fileName(raw)
		if name == "" {
			return nil, nil, badUpload(uploadFileField, "part %d has no file name (Content-Disposition filename)", len(files)+1)
		}
		// mime.ParseMediaType refuses raw controls in filename="...", but
		// decodes them from RFC 2231's filename* (%1b). A name is a
		// document's title, shown in terminals and logs.
		if i := strings.IndexFunc(name, utf8x.Unprintable); i >= 0 {
			r, _ := utf8.DecodeRuneInString(name[i:])
			return nil, nil, badUpload(uploadFileField, "part %d's file name holds %U, a control or bidirectional formatting character, at byte %d", len(files)+1, r, i)
		}
		current = fmt.Sprintf("file %q", name)
		data, err := io.ReadAll(io.LimitReader(part, maxFile+1))
		if err != nil {
			return nil, nil, readFailure(err, current, maxTotal, g.cfg.BodyTimeout)
		}
		if int64(len(data)) > maxFile {
			return nil, nil, tooLarge("%q is larger than %d bytes, the limit per file (GATEWAY_UPLOAD_MAX_FILE_BYTES)", name, maxFile)
		}
		if total += int64(len(data)); total > maxTotal {
			return nil, nil, tooLarge("%q takes the upload's files past %d bytes, the limit of one upload (GATEWAY_UPLOAD_MAX_BYTES)", name, maxTotal)
		}
		f, uerr := classify(name, data)
		if uerr != nil {
			return nil, nil, uerr
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, nil, badUpload(uploadFileField, "is required: the upload has no part named %q with a file", uploadFileField)
	}
	req, uerr := uploadRequest(r, files, fields)
	return req, files, uerr
}

// nameFile names the file an indexer's InvalidArgument is about: its
// field is raw_content (the one text file or .eml the content is) or
// attachments[i] (a file in upload order among the attachments).
func nameFile(st *status.Status, req *indexerv1.IngestDocumentRequest, files []uploadedFile) *status.Status {
	if st.Code() != codes.InvalidArgument {
		return st
	}
	msg := st.Message()
	name := ""
	var contents []string
	for _, f := range files {
		if f.kind == kindText || f.kind == kindEmail {
			contents = append(contents, f.name)
		}
	}
	var i int
	switch {
	case strings.HasPrefix(msg, "raw_content") && len(contents) == 1:
		name = contents[0]
	case strings.HasPrefix(msg, "attachments["):
		if _, err := fmt.Sscanf(msg, "attachments[%d]", &i); err == nil && i >= 0 && i < len(req.GetAttachments()) {
			name = req.GetAttachments()[i].GetName()
		}
	}
	if name == "" {
		return st
	}
	p := st.Proto()
	p.Message = fmt.Sprintf("file %q: %s", name, msg)
	return status.FromProto(p)
}

// readFailure turns an error reading the body into the upload's answer:
// 413 past the size limit, 408 past the time limit, 400 otherwise.
func readFailure(err error, what string, maxTotal int64, limit time.Duration) *uploadError {
	var tooBig *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooBig):
		return tooLarge("%s takes the upload past %d bytes, the limit of one upload (GATEWAY_UPLOAD_MAX_BYTES)", what, maxTotal)
	case errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return &uploadError{http.StatusRequestTimeout, status.Errorf(codes.DeadlineExceeded, "request body not received within %s", limit)}
	}
	return badUpload(uploadFileField, "reading %s: malformed multipart body: %v", what, err)
}

// maxFileName bounds a file's name, in bytes.
const maxFileName = 256

// fileName is the base name of a part's file name (at most maxFileName
// bytes, checked before), whichever separator the client's system uses;
// empty when nothing is left.
func fileName(s string) string {
	s = s[strings.LastIndexAny(s, `/\`)+1:]
	if s == "." || s == ".." || !utf8.ValidString(s) {
		return ""
	}
	return strings.TrimSpace(s)
}

// classify decides what a file is from its bytes (WHATWG MIME sniffing,
// as http.DetectContentType implements it), never from the part's
// Content-Type; a file whose name promises another kind is refused.
func classify(name string, data []byte) (uploadedFile, *uploadError) {
	f := uploadedFile{name: name, data: data}
	if len(data) == 0 {
		return f, badUpload(uploadFileField, "%q is empty", name)
	}
	sniffed, _, _ := strings.Cut(http.DetectContentType(data), ";")
	f.mime = sniffed
	ext := strings.ToLower(path.Ext(name))
	switch {
	case uploadImageTypes[sniffed]:
		f.kind = kindImage
	case sniffed == "application/pdf":
		f.kind = kindPDF
	case strings.HasPrefix(sniffed, "text/"):
		f.kind = kindText
		if ext == ".eml" {
			f.kind = kindEmail
		}
	default:
		return f, badUpload(uploadFileField, "%q is %s (judged by its bytes), which an upload does not take: text (.txt, .log, .md, .eml), PDF, PNG, JPEG, GIF or WEBP", name, sniffed)
	}
	switch {
	case imageExts[ext] && f.kind != kindImage:
		return f, badUpload(uploadFileField, "%q is named as an image but its bytes are %s, not PNG, JPEG, GIF or WEBP", name, sniffed)
	case ext == ".pdf" && f.kind != kindPDF:
		return f, badUpload(uploadFileField, "%q is named as a PDF but its bytes are %s", name, sniffed)
	case textExts[ext] && f.kind != kindText && f.kind != kindEmail:
		return f, badUpload(uploadFileField, "%q is named as text but its bytes are %s", name, sniffed)
	}
	if (f.kind == kindText || f.kind == kindEmail) && !utf8.Valid(data) {
		return f, badUpload(uploadFileField, "%q is not UTF-8 text (convert it, or send the e-mail with its 8-bit parts encoded)", name)
	}
	return f, nil
}

// uploadRequest builds the IngestDocument request of checked files.
func uploadRequest(r *http.Request, files []uploadedFile, fields map[string]string) (*indexerv1.IngestDocumentRequest, *uploadError) {
	req := &indexerv1.IngestDocumentRequest{Title: fields["title"]}
	if p, ok := principalFrom(r.Context()); ok {
		req.Scope = &commonv1.Scope{TenantId: p.Tenant, ProjectId: p.Project}
	}
	if project := fields["project_id"]; project != "" {
		// The project to store it in, as scope.project_id of the JSON API:
		// any of its tenant's for a tenant-wide key; a key bound to a
		// project may name only that one (the indexer refuses another).
		if err := grpcx.ValidScopeID(project); err != nil {
			return nil, badUpload("project_id", "%v", err)
		}
		if req.Scope == nil {
			req.Scope = &commonv1.Scope{}
		}
		req.Scope.ProjectId = project
	}
	urn, urnField := fields["source_urn"], "source_urn"
	if u := fields["source_url"]; u != "" {
		if urn != "" {
			return nil, badUpload("source_url", "and source_urn name the same thing: give one")
		}
		urn, urnField = u, "source_url"
	}
	if urn != "" {
		if u, err := url.Parse(urn); err != nil || u.Scheme == "" || strings.ContainsAny(urn, " \t\r\n") || len(urn) > 4096 {
			return nil, badUpload(urnField, "must be an absolute URL or URN (scheme:...) of at most 4096 bytes")
		}
		req.SourceUrl = urn
	}

	var email *uploadedFile
	var texts, attached []uploadedFile
	for i, f := range files {
		switch f.kind {
		case kindEmail:
			if email != nil || len(texts) > 0 {
				return nil, badUpload(uploadFileField, "%q: an .eml is a whole document; upload it without other text files or e-mails", f.name)
			}
			email = &files[i]
		case kindText:
			if email != nil {
				return nil, badUpload(uploadFileField, "%q: an .eml is a whole document; upload it without other text files or e-mails", f.name)
			}
			texts = append(texts, f)
		default:
			attached = append(attached, f)
			req.Attachments = append(req.Attachments, &indexerv1.Attachment{Name: f.name, MimeType: f.mime, Data: f.data})
		}
	}
	if req.Title == "" {
		req.Title = files[0].name
	}

	st, uerr := sourceType(fields["source_type"], email != nil, texts)
	if uerr != nil {
		return nil, uerr
	}
	req.SourceType = st

	switch {
	case email != nil:
		// The raw message: the indexer's parser takes its headers, parts
		// and attachments apart. Files beside it join its attachments.
		req.RawContent = string(email.data)
	default:
		var b strings.Builder
		for i, f := range texts {
			if len(texts) > 1 {
				if i > 0 {
					b.WriteString("\n\n")
				}
				fmt.Fprintf(&b, "File: %s\n\n", f.name)
			}
			b.WriteString(string(f.data))
		}
		// The attachments are named in the text, with their digests: the
		// indexer identifies a document by its text, so another PDF under
		// the same text is another version, not the same one.
		if len(attached) > 0 {
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString("Attached files:\n")
			for _, f := range attached {
				fmt.Fprintf(&b, "- %s (%s, %d bytes, sha256 %x)\n", f.name, f.mime, len(f.data), sha256.Sum256(f.data))
			}
		}
		req.RawContent = b.String()
	}
	return req, nil
}

// sourceType reads the source_type field ("email", "SOURCE_TYPE_EMAIL",
// ...); without it an .eml is an e-mail, text files all .log a log, and
// anything else OTHER.
func sourceType(v string, email bool, texts []uploadedFile) (indexerv1.SourceType, *uploadError) {
	if v != "" {
		name := strings.ToUpper(v)
		if !strings.HasPrefix(name, "SOURCE_TYPE_") {
			name = "SOURCE_TYPE_" + name
		}
		st, ok := indexerv1.SourceType_value[name]
		if !ok || st == 0 {
			return 0, badUpload("source_type", "%q is not one of email, ticket, wiki, log, report, other", v)
		}
		return indexerv1.SourceType(st), nil
	}
	if email {
		return indexerv1.SourceType_SOURCE_TYPE_EMAIL, nil
	}
	logs := len(texts) > 0
	for _, f := range texts {
		logs = logs && strings.EqualFold(path.Ext(f.name), ".log")
	}
	if logs {
		return indexerv1.SourceType_SOURCE_TYPE_LOG, nil
	}
	return indexerv1.SourceType_SOURCE_TYPE_OTHER, nil
}
