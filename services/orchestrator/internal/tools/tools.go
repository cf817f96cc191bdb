// Package tools is the chat loop's tool registry: Go tools implement one
// small interface, the registry validates each call's arguments against the
// tool's JSON schema before running it, and every failure (unknown tool,
// malformed or invalid arguments, an error, a panic, a timeout) becomes a
// Result the model can read, never an error that stops the loop.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/libs/jsonschemax"
	"github.com/agentmesh/agentmesh/libs/utf8x"
)

// Tool is a function the model may call.
type Tool interface {
	// Name is unique in a registry: letters, digits, '_' and '-', as
	// providers require of function names.
	Name() string
	// Description tells the model what the tool does and when to use it.
	Description() string
	// Schema is the JSON schema (text) of the arguments object. Its
	// top-level type must be "object".
	Schema() string
	// Execute runs the tool. call.Arguments has been validated against
	// Schema. The returned text is what the model reads; an error is shown
	// to the model as a tool error. Execute must stop when ctx is done.
	Execute(ctx context.Context, call Call) (string, error)
}

// Call is one invocation of a tool.
type Call struct {
	// ID is the model's call id.
	ID string
	// Name is the tool the model named.
	Name string
	// Arguments is the JSON arguments object the model sent.
	Arguments json.RawMessage
	// Scope is the tenant and project of the conversation; tools that read
	// tenant data must confine themselves to it.
	Scope *commonv1.Scope
	// ConversationID is the conversation the call belongs to.
	ConversationID string
}

// Result is the outcome of a call, as fed back to the model.
type Result struct {
	// Content is the tool's output, or the error text when IsError.
	Content string
	// IsError is true when the call failed.
	IsError bool
	// Duration is the execution time, validation included.
	Duration time.Duration
}

// Definition describes a registered tool.
type Definition struct {
	// Name, Description and Schema are the tool's.
	Name, Description, Schema string
	// MCPServer names the MCP server providing the tool (a tool with a
	// method MCPServer() string); empty for a built-in tool.
	MCPServer string
}

// Options tune a Registry.
type Options struct {
	// Timeout bounds one call; 0 means no bound beyond the caller's context.
	Timeout time.Duration
	// MaxResultBytes truncates longer outputs, so one tool cannot flood the
	// model's context; 0 means 32 KiB.
	MaxResultBytes int
	// Logger receives tool panics with their stack; nil discards them.
	Logger *slog.Logger
}

// Registry holds tools by name. It is immutable after NewRegistry and safe
// for concurrent use.
type Registry struct {
	opts   Options
	byName map[string]*registered
	names  []string // sorted
}

type registered struct {
	tool   Tool
	schema *jsonschema.Schema
}

// NewRegistry compiles each tool's schema and returns a registry of them.
// It fails on an invalid name, a duplicate name, or a schema that does not
// compile or does not describe an object.
func NewRegistry(opts Options, tools ...Tool) (*Registry, error) {
	if opts.MaxResultBytes <= 0 {
		opts.MaxResultBytes = 32 << 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{opts: opts, byName: map[string]*registered{}}
	if err := r.add(tools); err != nil {
		return nil, err
	}
	return r, nil
}

// With returns a registry holding r's tools and more, with r's options; r
// is unchanged. It fails as NewRegistry does, for the new tools.
func (r *Registry) With(more ...Tool) (*Registry, error) {
	out := &Registry{opts: r.opts, byName: make(map[string]*registered, len(r.byName)+len(more)), names: slices.Clone(r.names)}
	for n, reg := range r.byName {
		out.byName[n] = reg // compiled once, shared: registered tools are immutable
	}
	if err := out.add(more); err != nil {
		return nil, err
	}
	return out, nil
}

// add compiles and registers tools; it is only called before r is shared.
func (r *Registry) add(tools []Tool) error {
	for _, t := range tools {
		name := t.Name()
		if !validName(name) {
			return fmt.Errorf("tools: invalid tool name %q: use 1-64 letters, digits, '_' or '-'", name)
		}
		if _, dup := r.byName[name]; dup {
			return fmt.Errorf("tools: tool %q registered twice", name)
		}
		sch, err := compile(name, t.Schema())
		if err != nil {
			return err
		}
		r.byName[name] = &registered{tool: t, schema: sch}
		r.names = append(r.names, name)
	}
	slices.Sort(r.names)
	return nil
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func compile(name, schema string) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("tools: schema of %s is not JSON: %w", name, err)
	}
	if obj, ok := doc.(map[string]any); !ok || obj["type"] != "object" {
		return nil, fmt.Errorf(`tools: schema of %s must have "type": "object"`, name)
	}
	sch, err := jsonschemax.Compile(jsonschemax.NewCompiler(), "mem:///tools/"+name+".json", doc)
	if err != nil {
		return nil, fmt.Errorf("tools: schema of %s: %w", name, err)
	}
	return sch, nil
}

// Definitions lists the registered tools sorted by name.
func (r *Registry) Definitions() []Definition {
	out := make([]Definition, 0, len(r.names))
	for _, n := range r.names {
		t := r.byName[n].tool
		d := Definition{Name: n, Description: t.Description(), Schema: t.Schema()}
		if m, ok := t.(interface{ MCPServer() string }); ok {
			d.MCPServer = m.MCPServer()
		}
		out = append(out, d)
	}
	return out
}

// Execute validates call against the named tool's schema and runs it. It
// never returns an error: every failure is a Result with IsError set and a
// message written for the model, so it can correct itself.
func (r *Registry) Execute(ctx context.Context, call Call) Result {
	start := time.Now()
	content, err := r.execute(ctx, call)
	res := Result{Content: content, Duration: time.Since(start)}
	if err != nil {
		res.Content, res.IsError = "error: "+err.Error(), true
	}
	res.Content = truncate(res.Content, r.opts.MaxResultBytes)
	return res
}

func (r *Registry) execute(ctx context.Context, call Call) (out string, err error) {
	// Calls run in the chat loop's goroutines, which nothing else
	// recovers: a panic checking the arguments (the schema library's) or
	// in the tool is the model's error to read, not the process's end.
	defer func() {
		if p := recover(); p != nil {
			r.opts.Logger.ErrorContext(ctx, "tool panicked", "tool", call.Name, "panic", p, "stack", string(debug.Stack()))
			out, err = "", fmt.Errorf("%s crashed: %v", call.Name, p)
		}
	}()
	reg, ok := r.byName[call.Name]
	if !ok {
		return "", fmt.Errorf("unknown tool %q; available tools: %s", call.Name, strings.Join(r.names, ", "))
	}
	args := call.Arguments
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}") // some models send "" for a call without arguments
	}
	inst, err := jsonschema.UnmarshalJSON(strings.NewReader(string(args)))
	if err != nil {
		return "", fmt.Errorf("arguments for %s are not valid JSON: %v", call.Name, err)
	}
	if err := jsonschemax.Validate(reg.schema, inst); err != nil {
		return "", fmt.Errorf("invalid arguments for %s: %s", call.Name, describe(err))
	}
	call.Arguments = args
	if r.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, r.opts.Timeout, fmt.Errorf("%s timed out after %v", call.Name, r.opts.Timeout))
		defer cancel()
	}
	out, err = reg.tool.Execute(ctx, call)
	if err != nil && ctx.Err() != nil {
		// Say why the context ended (timeout, or the client went away)
		// rather than a bare "context canceled".
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
	}
	return out, err
}

// describe turns a schema validation error into one line per violation,
// without the schema URL the model cannot use.
func describe(err error) string {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err.Error()
	}
	lines := strings.Split(ve.Error(), "\n")
	var parts []string
	for _, l := range lines[1:] {
		if l = strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(l), "-")); l != "" {
			parts = append(parts, l)
		}
	}
	if len(parts) == 0 {
		return lines[0]
	}
	return strings.Join(parts, "; ")
}

// truncate cuts s to at most max bytes on a rune boundary, saying so.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	const note = "\n[output truncated]"
	return utf8x.Prefix(s, limit-len(note)) + note
}
