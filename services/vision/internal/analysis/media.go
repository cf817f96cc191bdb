package analysis

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// admit decides whether img goes to the vision model. It returns the
// normalised MIME type to send, or a reason to skip the image. Only raster
// images are analysed: vision models take pixels, and rendering PDF pages or
// SVG into images is not done here.
func admit(img Image, maxBytes int) (mimeType, skipped string) {
	if len(img.Data) == 0 {
		return "", "empty: the attachment has no bytes"
	}
	sniffed := normalizeMIME(http.DetectContentType(img.Data))
	mimeType = normalizeMIME(img.MIMEType)
	if mimeType == "" {
		mimeType = sniffed
		if !strings.HasPrefix(mimeType, "image/") {
			return "", fmt.Sprintf("not an image: no MIME type given and the bytes look like %s; only image/* attachments are analysed", mimeType)
		}
	}
	if !strings.HasPrefix(mimeType, "image/") {
		return "", fmt.Sprintf("not an image (%s): only image/* attachments are analysed", mimeType)
	}
	if mimeType == "image/svg+xml" {
		return "", "vector image (image/svg+xml): only raster images are analysed"
	}
	// The bytes decide, as intake's checks do: a model given text or an
	// archive labelled image/png fails the call, or describes nothing.
	if sniffed != mimeType {
		if !strings.HasPrefix(sniffed, "image/") {
			return "", fmt.Sprintf("not an image: declared %s, but the bytes look like %s; only image/* attachments are analysed", mimeType, sniffed)
		}
		mimeType = sniffed
	}
	if len(img.Data) > maxBytes {
		return "", fmt.Sprintf("too large: %d bytes, over the limit of %d bytes", len(img.Data), maxBytes)
	}
	return mimeType, ""
}

// normalizeMIME lowercases a media type and drops its parameters
// ("Image/PNG; charset=x" → "image/png").
func normalizeMIME(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	if mt, _, err := mime.ParseMediaType(s); err == nil {
		return mt
	}
	mt, _, _ := strings.Cut(s, ";")
	return strings.ToLower(strings.TrimSpace(mt))
}
