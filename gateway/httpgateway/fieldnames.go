package httpgateway

import (
	"regexp"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
)

// fieldPath matches a proto field path at the start of a service's
// message ("scope.project_id: ...", "messages[0].tool_call_id: ...").
var fieldPath = regexp.MustCompile(`^[a-z][a-z0-9_]*(\[[^\]]*\])*(\.[a-z][a-z0-9_]*(\[[^\]]*\])*)*$`)

// protoNamed reports whether s is a field path whose JSON name differs.
func protoNamed(s string) bool { return strings.Contains(s, "_") && fieldPath.MatchString(s) }

// grpcGatewayParse is grpc-gateway's refusal of a query value it could not
// put in its field: `parsing field "source_type": "99" is not a valid value`.
var grpcGatewayParse = regexp.MustCompile(`^parsing field "([a-z0-9_.]+)": (.*)$`)

// jsonFieldNames returns st as the JSON API names things: the services
// name fields by their proto paths (scope.project_id, options.top_p), the
// REST API and its documentation by their JSON names (scope.projectId,
// options.topP), which is what a REST caller wrote. The field at the head
// of the message and in every BadRequest violation is renamed; a message
// that does not start with a field path is left as it is. grpc-gateway's
// own refusal of a query value becomes the same "field: reason" with a
// violation naming the parameter.
func jsonFieldNames(st *status.Status) *status.Status {
	msg := st.Message()
	if m := grpcGatewayParse.FindStringSubmatch(msg); m != nil && st.Code() == codes.InvalidArgument {
		field := jsonPath(m[1])
		out := status.New(codes.InvalidArgument, field+": "+m[2])
		if d, err := out.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: field, Description: m[2]}}}); err == nil {
			out = d
		}
		return out
	}
	return renameFields(st, func(field string) (string, bool) { return jsonPath(field), protoNamed(field) })
}

// renameField returns st naming field as name instead, at the head of its
// message and in its BadRequest violations; st itself when it does not
// name field.
func renameField(st *status.Status, field, name string) *status.Status {
	return renameFields(st, func(f string) (string, bool) { return name, f == field })
}

// renameFields renames, with rename, the field at the head of st's message
// ("field: reason") and each of its BadRequest violations' fields, where
// rename says to (its bool); it returns st itself when nothing was renamed.
func renameFields(st *status.Status, rename func(field string) (string, bool)) *status.Status {
	p := st.Proto() // a copy
	renamed := false
	if head, rest, ok := strings.Cut(p.GetMessage(), ": "); ok {
		if to, ok := rename(head); ok {
			p.Message, renamed = to+": "+rest, true
		}
	}
	for i, a := range p.GetDetails() {
		var br errdetails.BadRequest
		if a.MessageIs(&br) && a.UnmarshalTo(&br) == nil {
			changed := false
			for _, v := range br.GetFieldViolations() {
				if to, ok := rename(v.GetField()); ok {
					v.Field, changed = to, true
				}
			}
			if b, err := anypb.New(&br); err == nil && changed {
				p.Details[i], renamed = b, true
			}
		}
	}
	if !renamed {
		return st
	}
	return status.FromProto(p)
}

// jsonPath renames each field of a proto path to its JSON name
// (lowerCamelCase, as protoc names fields without a json_name), keeping
// indexes and map keys: messages[0].tool_call_id → messages[0].toolCallId.
func jsonPath(path string) string {
	var b strings.Builder
	upper, inBrackets := false, false
	for i := 0; i < len(path); i++ {
		c := path[i]
		switch {
		case inBrackets:
			inBrackets = c != ']'
		case c == '[':
			inBrackets = true
		case c == '_':
			upper = true
			continue
		case upper && c >= 'a' && c <= 'z':
			c -= 'a' - 'A'
		}
		upper = false
		b.WriteByte(c)
	}
	return b.String()
}
