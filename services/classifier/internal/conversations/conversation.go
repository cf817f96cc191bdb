// Package conversations stores the customer-service conversations a run
// classifies: validation of imported conversations (one rejection report
// per line), JSON Lines parsing, the MongoDB store scoped by tenant and
// project, and the embedded sample set a newcomer can try a run on.
package conversations

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	classifierv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/classifier/v1"
	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Validation limits.
const (
	// MaxMessages bounds the messages of one conversation.
	MaxMessages = 500
	// MaxTextBytes bounds one message's text.
	MaxTextBytes = 32 << 10
	// MaxLineBytes bounds one JSON Lines line.
	MaxLineBytes = 4 << 20
	// MaxImport bounds the conversations of one import request.
	MaxImport = 10000
	// maxMetadataKeys bounds metadata keys, nested ones included.
	maxMetadataKeys = 100
)

// Roles a message may have.
var Roles = []string{"customer", "agent", "system"}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$`)

// Turn is one message.
type Turn struct {
	// Role is "customer", "agent" or "system".
	Role string
	// Text is the message text.
	Text string
	// Time is when it was sent; zero if unknown.
	Time time.Time
}

// Conversation is a customer-service conversation.
type Conversation struct {
	// ID is unique within a scope.
	ID string
	// Channel is e.g. "chat" or "email".
	Channel string
	// Customer is the customer id.
	Customer string
	// Messages in order; at least one.
	Messages []Turn
	// Metadata is free-form (JSON-shaped: strings, float64, bool, nil,
	// []any, map[string]any).
	Metadata map[string]any
}

// Rejection reports one conversation that was not imported.
type Rejection struct {
	// Line is the 1-based line or list position.
	Line int
	// Reason names the field and what is wrong.
	Reason string
}

// FieldError is a validation failure of one field.
type FieldError struct {
	// Field is the path, e.g. "messages[2].role".
	Field string
	// Reason says what is wrong.
	Reason string
}

// Error implements error.
func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// FromProto validates c and converts it.
func FromProto(c *classifierv1.CustomerConversation) (Conversation, error) {
	out := Conversation{
		ID:       strings.TrimSpace(c.GetId()),
		Channel:  strings.TrimSpace(c.GetChannel()),
		Customer: strings.TrimSpace(c.GetCustomer()),
	}
	switch {
	case out.ID == "":
		return Conversation{}, &FieldError{"id", "is required"}
	case !idPattern.MatchString(out.ID):
		return Conversation{}, &FieldError{"id", "must be 1-128 characters of letters, digits, '_', '.', ':' or '-', starting with a letter or digit"}
	case len(out.Channel) > 64:
		return Conversation{}, &FieldError{"channel", "longer than 64 characters"}
	case len(out.Customer) > 128:
		return Conversation{}, &FieldError{"customer", "longer than 128 characters"}
	case len(c.GetMessages()) == 0:
		return Conversation{}, &FieldError{"messages", "at least one message is required"}
	case len(c.GetMessages()) > MaxMessages:
		return Conversation{}, &FieldError{"messages", fmt.Sprintf("more than %d messages", MaxMessages)}
	}
	for i, m := range c.GetMessages() {
		f := fmt.Sprintf("messages[%d]", i)
		role := strings.ToLower(strings.TrimSpace(m.GetRole()))
		if !validRole(role) {
			return Conversation{}, &FieldError{f + ".role", fmt.Sprintf("%q is not one of %s", m.GetRole(), strings.Join(Roles, ", "))}
		}
		text := strings.TrimSpace(m.GetText())
		if text == "" {
			return Conversation{}, &FieldError{f + ".text", "is required"}
		}
		if len(text) > MaxTextBytes {
			return Conversation{}, &FieldError{f + ".text", fmt.Sprintf("longer than %d bytes", MaxTextBytes)}
		}
		t := Turn{Role: role, Text: text}
		if m.GetTime() != nil {
			if err := m.GetTime().CheckValid(); err != nil {
				return Conversation{}, &FieldError{f + ".time", err.Error()}
			}
			t.Time = m.GetTime().AsTime().UTC()
		}
		out.Messages = append(out.Messages, t)
	}
	if md := c.GetMetadata(); md != nil {
		n := 0
		if err := checkMetadata("metadata", md.AsMap(), &n, 0); err != nil {
			return Conversation{}, err
		}
		out.Metadata = md.AsMap()
	}
	return out, nil
}

func validRole(r string) bool {
	for _, x := range Roles {
		if r == x {
			return true
		}
	}
	return false
}

// checkMetadata keeps metadata storable and queryable: keys are plain
// words (no '$' or '.', which MongoDB treats as operators and paths).
func checkMetadata(path string, m map[string]any, n *int, depth int) error {
	if depth > 3 {
		return &FieldError{path, "nested deeper than 3 levels"}
	}
	for k, v := range m {
		*n++
		if *n > maxMetadataKeys {
			return &FieldError{"metadata", fmt.Sprintf("more than %d keys", maxMetadataKeys)}
		}
		if k == "" || strings.ContainsAny(k, "$.") || len(k) > 64 {
			return &FieldError{path, fmt.Sprintf("key %q must be 1-64 characters without '$' or '.'", k)}
		}
		if err := checkMetadataValue(path+"."+k, v, n, depth); err != nil {
			return err
		}
	}
	return nil
}

// checkMetadataValue checks the objects a metadata value holds, in lists
// too. A list directly inside a list is refused: the embedded store
// (FerretDB) cannot keep one.
func checkMetadataValue(path string, v any, n *int, depth int) error {
	switch v := v.(type) {
	case map[string]any:
		return checkMetadata(path, v, n, depth+1)
	case []any:
		for i, e := range v {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if _, ok := e.([]any); ok {
				return &FieldError{ep, "a list inside a list cannot be stored"}
			}
			if err := checkMetadataValue(ep, e, n, depth); err != nil {
				return err
			}
		}
	}
	return nil
}

// Proto converts c back to its API form.
func (c Conversation) Proto() *classifierv1.CustomerConversation {
	out := &classifierv1.CustomerConversation{Id: c.ID, Channel: c.Channel, Customer: c.Customer}
	for _, m := range c.Messages {
		t := &classifierv1.ConversationTurn{Role: m.Role, Text: m.Text}
		if !m.Time.IsZero() {
			t.Time = timestamppb.New(m.Time)
		}
		out.Messages = append(out.Messages, t)
	}
	if len(c.Metadata) > 0 {
		if s, err := structpb.NewStruct(c.Metadata); err == nil {
			out.Metadata = s
		}
	}
	return out
}

// Parsed is a valid conversation with the line it came from.
type Parsed struct {
	// Line is its 1-based line (or list position).
	Line int
	// Conversation is the validated conversation.
	Conversation Conversation
}

// Validate checks a list of conversations, as an import does: it returns the
// valid ones and a rejection per invalid one (position counted from
// firstLine). A conversation whose id already appeared earlier is rejected,
// naming the line that has it.
func Validate(list []*classifierv1.CustomerConversation, firstLine int, seen map[string]int) ([]Parsed, []Rejection) {
	var ok []Parsed
	var rej []Rejection
	for i, c := range list {
		line := firstLine + i
		conv, err := FromProto(c)
		if err != nil {
			rej = append(rej, Rejection{Line: line, Reason: err.Error()})
			continue
		}
		if prev, dup := seen[conv.ID]; dup {
			rej = append(rej, Rejection{Line: line, Reason: fmt.Sprintf("id: %q duplicates line %d", conv.ID, prev)})
			continue
		}
		seen[conv.ID] = line
		ok = append(ok, Parsed{Line: line, Conversation: conv})
	}
	return ok, rej
}

// ErrTooMany means an import holds more than MaxImport conversations.
var ErrTooMany = fmt.Errorf("more than %d conversations in one import", MaxImport)

// ParseJSONL reads JSON Lines: one conversation object per line, in the
// API's JSON form (camelCase or snake_case field names). Blank lines are
// skipped but counted. It returns the valid conversations and one rejection
// per invalid line; ids are checked for duplicates across the lines and
// against seen (which it updates). It fails only on a read error, a line
// longer than MaxLineBytes, or more than MaxImport lines.
func ParseJSONL(r io.Reader, seen map[string]int) ([]Parsed, []Rejection, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var ok []Parsed
	var rej []Rejection
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if len(ok)+len(rej) >= MaxImport {
			return nil, nil, ErrTooMany
		}
		c := &classifierv1.CustomerConversation{}
		if err := protojson.Unmarshal([]byte(text), c); err != nil {
			reason := cleanProtoJSONError(err)
			if _, esc, ok := utf8x.LoneSurrogate([]byte(text)); ok {
				// protojson says "unexpected EOF" or "invalid escape code".
				reason = esc + " is half of a UTF-16 surrogate pair without its other half; write the character itself, or both halves"
			}
			rej = append(rej, Rejection{Line: line, Reason: "invalid JSON: " + reason})
			continue
		}
		p, r := Validate([]*classifierv1.CustomerConversation{c}, line, seen)
		ok = append(ok, p...)
		rej = append(rej, r...)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, fmt.Errorf("line %d: longer than %d bytes", line+1, MaxLineBytes)
		}
		return nil, nil, err
	}
	return ok, rej, nil
}

// cleanProtoJSONError drops protojson's unstable "proto: (line 1:2): "
// prefix noise but keeps the field it names.
func cleanProtoJSONError(err error) string {
	// protojson's prefix is "proto:" and a space that is sometimes a
	// no-break space (to discourage matching its text): normalise first.
	s := strings.ReplaceAll(err.Error(), "\u00a0", " ")
	return strings.TrimPrefix(s, "proto: ")
}
