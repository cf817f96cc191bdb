// Package tools is the registry of the tools an analysis may plan: their
// definitions (name, description, JSON schema of the arguments — all the
// planning model ever sees) and, registered separately, the Go executors that
// run them. Adding a tool is one [Definition] and one [Executor].
//
// The registry validates planned arguments against each definition's schema
// and canonicalises them ([Canonical]) so a call has one idempotency key
// ([IdempotencyKey]) however the model spelled it.
package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	commonv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/common/v1"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/schemas"
)

// Errors of the registry.
var (
	// ErrUnknownTool means no definition has the name.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrInvalidArguments means arguments do not satisfy the tool's schema
	// or are not a JSON object. The wrapping error says what is wrong.
	ErrInvalidArguments = errors.New("invalid arguments")
	// ErrInvalidDefinition means a definition cannot be registered.
	ErrInvalidDefinition = errors.New("invalid tool definition")
)

// Definition describes a tool to the planning model. It carries no
// behaviour: the executor is registered on its own with [Registry.Handle].
type Definition struct {
	// Name is unique in the registry: letters, digits, '_' and '-'.
	Name string
	// Description tells the model what the tool returns and when to use it.
	Description string
	// Parameters is the JSON schema of the arguments object.
	Parameters json.RawMessage
	// Timeout bounds one execution; zero means the executor default the
	// engine is configured with.
	Timeout time.Duration
}

// Call is one validated tool call handed to an [Executor].
type Call struct {
	// Scope is the tenant and project of the analysis.
	Scope *commonv1.Scope
	// Tool is the tool name.
	Tool string
	// Args is the canonical JSON arguments object, valid against the
	// tool's schema.
	Args json.RawMessage
	// Key is the tool job's idempotency key ([IdempotencyKey]): the same
	// for every attempt of the job, so an executor calling a remote service
	// can pass it on.
	Key string
}

// Result is what a tool returned.
type Result struct {
	// Data is the tool's JSON result. An empty result ([IsEmpty]) is
	// recorded as a data gap, not a data source.
	Data json.RawMessage
}

// Executor runs one tool in Go, without any model. Execute must honour ctx
// (the engine cancels it on timeout and on CancelJob) and be safe for
// concurrent use. A returned error fails the tool job with that message.
type Executor interface {
	Execute(ctx context.Context, call Call) (Result, error)
}

// ExecutorFunc adapts a function to [Executor].
type ExecutorFunc func(ctx context.Context, call Call) (Result, error)

// Execute calls f.
func (f ExecutorFunc) Execute(ctx context.Context, call Call) (Result, error) { return f(ctx, call) }

// Registry holds tool definitions and executors. Register everything at
// start-up; after that a Registry is safe for concurrent use.
type Registry struct {
	mu        sync.RWMutex
	defs      map[string]*entry   // guarded by mu
	order     []string            // guarded by mu: definition names in registration order
	executors map[string]Executor // guarded by mu
}

// entry is a definition with its compiled schema.
type entry struct {
	def    Definition
	schema *schemas.Compiled
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{defs: map[string]*entry{}, executors: map[string]Executor{}}
}

// Clone returns a registry with r's definitions and executors, to which
// more can be registered without changing r.
func (r *Registry) Clone() *Registry {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := &Registry{defs: make(map[string]*entry, len(r.defs)), order: slices.Clone(r.order), executors: make(map[string]Executor, len(r.executors))}
	for n, e := range r.defs {
		out.defs[n] = e // immutable once defined
	}
	for n, ex := range r.executors {
		out.executors[n] = ex
	}
	return out
}

// Define registers a definition. It fails with [ErrInvalidDefinition] if the
// name is empty, malformed or taken, or the parameters are not a valid JSON
// schema of an object.
func (r *Registry) Define(d Definition) error {
	if !validName(d.Name) {
		return fmt.Errorf("%w: name %q must be 1-64 letters, digits, '_' or '-'", ErrInvalidDefinition, d.Name)
	}
	if strings.TrimSpace(d.Description) == "" {
		return fmt.Errorf("%w: %s: empty description", ErrInvalidDefinition, d.Name)
	}
	sch, err := compileParameters(d.Name, d.Parameters)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidDefinition, d.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.defs[d.Name]; dup {
		return fmt.Errorf("%w: %s defined twice", ErrInvalidDefinition, d.Name)
	}
	d.Parameters = slices.Clone(d.Parameters)
	r.defs[d.Name] = &entry{def: d, schema: sch}
	r.order = append(r.order, d.Name)
	return nil
}

// Handle registers the executor of the tool name. A name may have one
// executor.
func (r *Registry) Handle(name string, ex Executor) error {
	if ex == nil {
		return fmt.Errorf("%w: %s: nil executor", ErrInvalidDefinition, name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.executors[name]; dup {
		return fmt.Errorf("%w: %s has two executors", ErrInvalidDefinition, name)
	}
	r.executors[name] = ex
	return nil
}

// Check reports definitions without an executor and executors without a
// definition. Call it once registration is done.
func (r *Registry) Check() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var errs []error
	for _, name := range r.order {
		if _, ok := r.executors[name]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s has no executor", ErrInvalidDefinition, name))
		}
	}
	for name := range r.executors {
		if _, ok := r.defs[name]; !ok {
			errs = append(errs, fmt.Errorf("%w: executor %s has no definition", ErrInvalidDefinition, name))
		}
	}
	return errors.Join(errs...)
}

// Names returns the defined tool names in registration order.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.order)
}

// Definitions returns the definitions of the allowed tools, in registration
// order; empty allowed means every tool. An allowed name that is not defined
// is an [ErrUnknownTool] error naming it.
func (r *Registry) Definitions(allowed []string) ([]Definition, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, name := range allowed {
		if _, ok := r.defs[name]; !ok {
			return nil, fmt.Errorf("%w: %s", ErrUnknownTool, name)
		}
	}
	out := make([]Definition, 0, len(r.order))
	for _, name := range r.order {
		if len(allowed) > 0 && !slices.Contains(allowed, name) {
			continue
		}
		out = append(out, r.defs[name].def)
	}
	return out, nil
}

// Definition returns the definition of name.
func (r *Registry) Definition(name string) (Definition, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.defs[name]
	if !ok {
		return Definition{}, false
	}
	return e.def, true
}

// Executor returns the executor of name.
func (r *Registry) Executor(name string) (Executor, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ex, ok := r.executors[name]
	return ex, ok
}

// Validate checks a planned call: the tool must be defined ([ErrUnknownTool])
// and args must be one JSON object valid against its schema
// ([ErrInvalidArguments], with the validator's explanation). Empty args mean
// {}. It returns the canonical arguments.
func (r *Registry) Validate(name string, args []byte) (json.RawMessage, error) {
	r.mu.RLock()
	e, ok := r.defs[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	canon, err := Canonical(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArguments, err)
	}
	if canon[0] != '{' {
		return nil, fmt.Errorf("%w: arguments must be a JSON object", ErrInvalidArguments)
	}
	if err := e.schema.ValidateJSON(canon); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArguments, err)
	}
	return canon, nil
}

// compileParameters compiles a parameters schema, which must describe an
// object.
func compileParameters(name string, params json.RawMessage) (*schemas.Compiled, error) {
	sch, err := schemas.Compile("tools/"+name, params)
	if err != nil {
		return nil, err
	}
	if !sch.DescribesObject() {
		return nil, errors.New(`parameters schema must have "type": "object"`)
	}
	return sch, nil
}

// validName reports whether s is a usable tool name.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-':
		default:
			return false
		}
	}
	return true
}
