package grpcx

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"buf.build/gen/go/bufbuild/protovalidate/protocolbuffers/go/buf/validate"
	"buf.build/go/protovalidate"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
)

// requestGuard checks every request before its handler runs, in one place
// for every service: the constraints its .proto declares (protovalidate:
// lengths, ranges, enums, required fields, cross-field rules), and that a
// request's scope agrees with the scope the gateway authenticated. Handlers
// keep only the rules a contract cannot state (configured limits, state).
type requestGuard struct {
	v protovalidate.Validator
}

// sharedGuard returns the process's one guard: protovalidate compiles each
// message's rules once and caches them, so every server of a process (all
// of them under agentmesh up) shares the cache.
var sharedGuard = sync.OnceValue(func() *requestGuard {
	v, err := protovalidate.New()
	if err != nil {
		// New fails only on a broken option (none are passed).
		panic(fmt.Sprintf("grpcx: protovalidate: %v", err))
	}
	return &requestGuard{v: v}
})

// check returns nil or an InvalidArgument status that names every field in
// violation (message: the first, BadRequest detail: all).
func (g *requestGuard) check(ctx context.Context, req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if err := checkScopeField(ctx, m.ProtoReflect()); err != nil {
		return err
	}
	err := g.v.Validate(m)
	if err == nil {
		return nil
	}
	var ve *protovalidate.ValidationError
	if !errors.As(err, &ve) || len(ve.Violations) == 0 {
		// A rule that could not run (a compilation or runtime error) is a
		// defect of the contract, not of the request.
		return Errorf(codes.Internal, "INTERNAL", "request validation failed: %v", err)
	}
	return violationsStatus(ve)
}

// violationsStatus renders protovalidate's violations as InvalidArgument
// in the mesh's shape: "field: what is wrong" and a BadRequest detail.
func violationsStatus(ve *protovalidate.ValidationError) error {
	br := &errdetails.BadRequest{}
	for _, v := range ve.Violations {
		field := protovalidate.FieldPathString(v.Proto.GetField())
		if field == "" {
			// A rule on the request message as a whole.
			field = "request"
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field: field, Description: describeViolation(v), Reason: v.Proto.GetRuleId(),
		})
	}
	first := br.FieldViolations[0]
	msg := first.Field + ": " + first.Description
	if n := len(br.FieldViolations) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(br); err == nil {
		st = d
	}
	return st.Err()
}

// refusesZero reports whether fd's rules refuse its enum's zero value.
func refusesZero(fd protoreflect.FieldDescriptor) bool {
	rules, ok := proto.GetExtension(fd.Options(), validate.E_Field).(*validate.FieldRules)
	return ok && slices.Contains(rules.GetEnum().GetNotIn(), 0)
}

// describeViolation is protovalidate's message without its "value" subject
// ("value must be greater than 0" → "must be greater than 0"), so the field
// name reads as the subject.
func describeViolation(v *protovalidate.Violation) string {
	if fd := v.FieldDescriptor; fd != nil && fd.Enum() != nil && strings.HasPrefix(v.Proto.GetRuleId(), "enum.") {
		// "must not be in list [0]" says little: name the values it may be.
		// The contracts exclude only the zero value (not_in: [0]), which
		// an undefined value's message must not offer either.
		excludeZero := v.Proto.GetRuleId() == "enum.not_in" || refusesZero(fd)
		var names []string
		values := fd.Enum().Values()
		for i := range values.Len() {
			if values.Get(i).Number() != 0 || !excludeZero {
				names = append(names, string(values.Get(i).Name()))
			}
		}
		return "must be one of " + strings.Join(names, ", ")
	}
	if fd := v.FieldDescriptor; fd != nil && v.Proto.GetRuleId() == "string.pattern" && fd.ContainingMessage().FullName() == scopeName {
		// The pattern itself ("does not match regex pattern `^[!-)+-…`")
		// says it to nobody: say what ValidScopeID does.
		return scopeIDRule
	}
	msg := v.Proto.GetMessage()
	for _, p := range []string{"value ", "Value "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return rest
		}
	}
	if msg == "" {
		return "violates rule " + v.Proto.GetRuleId()
	}
	return msg
}

var scopeName = (&commonv1.Scope{}).ProtoReflect().Descriptor().FullName()

// checkScopeField refuses a request whose top-level scope field names
// another tenant, or another project than a project-scoped key's, than the
// caller authenticated at the gateway. Handlers resolve the scope with
// Scope, which applies the same rule; doing it here as well means no
// handler can forget it.
func checkScopeField(ctx context.Context, m protoreflect.Message) error {
	fd := m.Descriptor().Fields().ByName("scope")
	if fd == nil || fd.Message() == nil || fd.Message().FullName() != scopeName || !m.Has(fd) {
		return nil
	}
	s, ok := m.Get(fd).Message().Interface().(*commonv1.Scope)
	if !ok {
		return nil
	}
	return scopeAgrees(ctx, s)
}

// CheckRequest runs on req the checks NewServer's servers run on every
// request (contract constraints, scope agreement with ctx's gateway
// metadata), for a request that arrives another way, such as a work
// queue message handed to a handler. It returns nil or an InvalidArgument
// status naming the fields.
func CheckRequest(ctx context.Context, req proto.Message) error {
	return sharedGuard().check(ctx, req)
}

// RequestChecks returns the server options that check every request as
// NewServer's servers do (contract constraints and scope agreement), for
// a plain grpc.Server in tests.
func RequestChecks() []grpc.ServerOption {
	g := sharedGuard()
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(unaryValidate(g)), grpc.ChainStreamInterceptor(streamValidate(g))}
}

func unaryValidate(g *requestGuard) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := g.check(ctx, req); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func streamValidate(g *requestGuard) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &validatingStream{ServerStream: ss, g: g})
	}
}

// validatingStream checks each message the client sends.
type validatingStream struct {
	grpc.ServerStream
	g *requestGuard
}

func (s *validatingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.check(s.Context(), m)
}
