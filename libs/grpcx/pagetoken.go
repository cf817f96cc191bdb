package grpcx

import (
	"encoding/base64"

	"google.golang.org/protobuf/proto"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

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
		return nil, InvalidArgument("page_token", "was issued for another scope or filter")
	}
	return pt, nil
}
