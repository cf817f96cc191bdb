package gatewayconn

import (
	"bytes"
	"context"
	"mime/multipart"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// UploadPath is the gateway's multipart document upload route. It has no
// gRPC method of its own (it makes one IngestDocument call of the files),
// so it is not in the OpenAPI document's operations the Conn maps.
const UploadPath = "/v1/documents:upload"

// File is one file of an upload.
type File struct {
	Name string
	Data []byte
}

// Upload posts files and fields as one multipart/form-data request to the
// gateway's UploadPath, files in parts named "file", and reads the JSON
// answer (an IngestDocumentResponse) into out. Errors are gRPC statuses, as
// Invoke's.
func (c *Conn) Upload(ctx context.Context, files []File, fields map[string]string, out proto.Message) error {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, v := range fields {
		if v == "" {
			continue
		}
		if err := mw.WriteField(k, v); err != nil {
			return status.Errorf(codes.Internal, "encoding the upload: %v", err)
		}
	}
	for _, f := range files {
		// CreateFormFile declares application/octet-stream: the gateway
		// judges a file by its bytes, not by what the client says.
		w, err := mw.CreateFormFile("file", f.Name)
		if err == nil {
			_, err = w.Write(f.Data)
		}
		if err != nil {
			return status.Errorf(codes.Internal, "encoding the upload: %v", err)
		}
	}
	if err := mw.Close(); err != nil {
		return status.Errorf(codes.Internal, "encoding the upload: %v", err)
	}
	u := *c.base
	u.Path += UploadPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), &body)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%v", err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/json")
	c.authorize(req)
	return c.roundTrip(req, out)
}
