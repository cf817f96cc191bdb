package grpcx

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// PageFilter fingerprints what a listing's page tokens are bound to (the
// listing, its scope and its filters, each a part), as filter_hash: a
// token is then taken only with the same parts.
func PageFilter(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// EncodePageToken returns pt as the opaque page token of a listing.
func EncodePageToken(pt *commonv1.PageToken) string {
	b, _ := proto.Marshal(pt)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodePageToken reads a page token the service issued for the listing
// whose filter hashes to filterHash (pt.filter_hash binds a token to the
// scope and filter it was made for). A token that does not decode, or was
// issued for another scope or filter, is InvalidArgument naming page_token.
func DecodePageToken(tok, filterHash string) (*commonv1.PageToken, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	pt := &commonv1.PageToken{}
	if err != nil || proto.Unmarshal(b, pt) != nil {
		return nil, InvalidArgument("page_token", "is not a token this service issued")
	}
	if pt.GetFilterHash() != filterHash {
		return nil, InvalidArgument("page_token", "is not a token of this listing: it was changed, or issued for another scope or filter (send the next_page_token of the previous page, with the same filter)")
	}
	return pt, nil
}

// CreateTimeRange reads a listing's create_time_from and create_time_to
// (created at or after from, before to); an unset bound is the zero time.
// A bound that is not a valid timestamp, or from after to, is
// InvalidArgument naming the field.
func CreateTimeRange(from, to *timestamppb.Timestamp) (time.Time, time.Time, error) {
	var f, t time.Time
	if from != nil {
		if err := from.CheckValid(); err != nil {
			return f, t, InvalidArgument("create_time_from", "is not a valid timestamp")
		}
		f = from.AsTime()
	}
	if to != nil {
		if err := to.CheckValid(); err != nil {
			return f, t, InvalidArgument("create_time_to", "is not a valid timestamp")
		}
		t = to.AsTime()
	}
	if !f.IsZero() && !t.IsZero() && f.After(t) {
		return f, t, InvalidArgument("create_time_from", "is after create_time_to")
	}
	return f, t, nil
}
