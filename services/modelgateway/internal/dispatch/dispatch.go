// Package dispatch runs model calls: it resolves a logical model to its
// fallback chain, limits concurrency per provider, retries retryable
// failures with backoff and jitter (honouring Retry-After), falls back along
// the chain, enforces structured output (validation, DeepSeek's blank-JSON
// retry, one repair), keeps provider availability from background probes,
// and records usage (metrics, and per-tenant counts for GetUsage) and one
// span per call.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentmesh/agentmesh/services/modelgateway/internal/llm"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/routing"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/structured"
	"github.com/agentmesh/agentmesh/services/modelgateway/internal/usage"
)

// Provider is what the dispatcher needs from an adapter. Implementations
// return *llm.Error for every failure and are safe for concurrent use.
type Provider interface {
	// Chat returns a complete answer.
	Chat(ctx context.Context, req *llm.Request) (*llm.Response, error)
	// Stream emits normalised events to sink, ending with llm.EventEnd.
	Stream(ctx context.Context, req *llm.Request, sink llm.Sink) error
	// Embed returns one vector per input.
	Embed(ctx context.Context, req *llm.EmbedRequest) (*llm.EmbedResponse, error)
	// Probe checks that the provider answers and can serve model.
	Probe(ctx context.Context, model string) error
}

// Backend is one provider of the routing table, ready or not.
type Backend struct {
	// Name is the provider's name in the routing table.
	Name string
	// Provider is the adapter; nil when the provider is not configured.
	Provider Provider
	// Unconfigured says why Provider is nil and how to configure it.
	Unconfigured string
	// MaxConcurrency and MaxQueue bound concurrent requests and waiters.
	MaxConcurrency, MaxQueue int
}

// RetryPolicy controls retries of retryable failures on one target.
type RetryPolicy struct {
	// MaxAttempts counts the first try (1 = no retries).
	MaxAttempts int
	// BaseDelay is the first backoff; it doubles per retry up to MaxDelay,
	// with jitter (each delay is drawn from [d/2, d]).
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter caps an honoured Retry-After; a longer one ends the
	// retries on that target (the chain moves on).
	MaxRetryAfter time.Duration
}

// Options configures a Gateway.
type Options struct {
	Retry RetryPolicy
	// ProbeInterval is how often RunProbes checks every target.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe.
	ProbeTimeout time.Duration
	// HowTo is appended to "no provider" errors: how to configure one.
	HowTo string
	// Logger, MeterProvider and TracerProvider default to slog.Default and
	// the otel globals.
	Logger         *slog.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// Usage counts tokens per tenant (GetUsage) and bounds the tenant
	// label of the token metric; nil counts up to DefaultUsageTenants.
	Usage *usage.Recorder
}

// DefaultUsageTenants is how many tenants Options.Usage counts by name
// when it is nil.
const DefaultUsageTenants = 100

type tenantKey struct{}

// WithTenant returns ctx naming the tenant a call is made for: its usage
// is counted under it.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// Gateway dispatches calls. Safe for concurrent use.
type Gateway struct {
	opts     Options
	backends map[string]*backend
	routes   map[string][]*target
	names    []string
	inst     *instrumentation
	tracer   trace.Tracer
	log      *slog.Logger
}

type backend struct {
	Backend
	limiter *Limiter
}

type target struct {
	spec   *routing.Target
	be     *backend
	status atomic.Pointer[probeStatus]
}

type probeStatus struct {
	ok     bool
	detail string
}

// New builds a Gateway for table over backends (one per table provider).
func New(table *routing.Table, backends []Backend, opts Options) (*Gateway, error) {
	if opts.Retry.MaxAttempts <= 0 {
		opts.Retry.MaxAttempts = 3
	}
	if opts.Retry.BaseDelay <= 0 {
		opts.Retry.BaseDelay = 250 * time.Millisecond
	}
	if opts.Retry.MaxDelay <= 0 {
		opts.Retry.MaxDelay = 8 * time.Second
	}
	if opts.Retry.MaxRetryAfter <= 0 {
		opts.Retry.MaxRetryAfter = 30 * time.Second
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 30 * time.Second
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	if opts.Usage == nil {
		opts.Usage = usage.New(DefaultUsageTenants, nil)
	}
	inst, err := newInstrumentation(opts.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("dispatch: metrics: %w", err)
	}
	g := &Gateway{
		opts:     opts,
		backends: map[string]*backend{},
		routes:   map[string][]*target{},
		inst:     inst,
		tracer:   opts.TracerProvider.Tracer("github.com/agentmesh/agentmesh/services/modelgateway"),
		log:      opts.Logger,
	}
	for _, b := range backends {
		mc, mq := b.MaxConcurrency, b.MaxQueue
		if mc <= 0 {
			mc = 64
		}
		if mq < 0 {
			mq = 0
		}
		g.backends[b.Name] = &backend{Backend: b, limiter: NewLimiter(b.Name, mc, mq)}
	}
	for _, name := range table.Names() {
		for _, spec := range table.Models[name] {
			be, ok := g.backends[spec.Provider]
			if !ok {
				return nil, fmt.Errorf("dispatch: models.%s names provider %q, which has no backend", name, spec.Provider)
			}
			g.routes[name] = append(g.routes[name], &target{spec: spec, be: be})
		}
		g.names = append(g.names, name)
	}
	return g, nil
}

// Call is one chat call.
type Call struct {
	// Logical is the logical model name.
	Logical string
	// Request is the request; its Model field is ignored (each target sets
	// its own).
	Request *llm.Request
	// Schema validates the answer of a FormatJSONSchema request; nil
	// otherwise.
	Schema *structured.Schema
}

// Result is a successful call.
type Result struct {
	Response *llm.Response
	// Provider and ProviderModel answered.
	Provider, ProviderModel string
	// Attempts counts upstream requests, retries and fallbacks included.
	Attempts int
	// Latency is the call's wall time.
	Latency time.Duration
	// TimeToFirstChunk is, for streams, the time to the first forwarded event.
	TimeToFirstChunk time.Duration
}

// Chat runs a unary call.
func (g *Gateway) Chat(ctx context.Context, c Call) (*Result, error) {
	return g.chat(ctx, "chat", c, nil)
}

// Stream runs a streaming call: content and reasoning deltas and complete
// tool calls go to sink as they come (for JSON formats the content is
// validated first and sent as one delta). The end event is not sent: the
// caller builds it from the Result. Once something has been sent, failures
// are returned as they are, without retry or fallback.
func (g *Gateway) Stream(ctx context.Context, c Call, sink llm.Sink) (*Result, error) {
	return g.chat(ctx, "stream", c, sink)
}

// run is the state of one call.
type run struct {
	g         *Gateway
	op        string
	logical   string
	span      trace.Span
	start     time.Time
	attempts  int
	sink      llm.Sink
	buffer    bool // hold content deltas back (structured output)
	forwarded bool
	firstAt   time.Duration
}

// clientError is a failure to hand an event to the caller.
type clientError struct{ err error }

func (e *clientError) Error() string { return "send to client: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

func (g *Gateway) chat(ctx context.Context, op string, c Call, sink llm.Sink) (*Result, error) {
	chain, ok := g.routes[c.Logical]
	if !ok {
		return nil, g.unknown(c.Logical)
	}
	ctx, span := g.tracer.Start(ctx, "modelgateway."+op, trace.WithAttributes(attribute.String("modelgateway.logical_model", c.Logical)))
	defer span.End()
	r := &run{g: g, op: op, logical: c.Logical, span: span, start: time.Now(), sink: sink,
		buffer: c.Request.ResponseFormat.Type != llm.FormatText}

	var failures []string
	var errs []*llm.Error
	var last *llm.Error
	var lastTarget *target
	cands, lastResort := g.candidates(chain)
	if len(cands) == 0 {
		err := g.noProvider(c.Logical, chain, nil)
		g.finish(ctx, r, nil, nil, err)
		return nil, err
	}
	for i, t := range cands {
		if i > 0 {
			span.AddEvent("fallback", trace.WithAttributes(
				attribute.String("to.provider", t.be.Name), attribute.String("to.model", t.spec.Model),
				attribute.String("after", last.Error())))
		}
		treq := t.spec.Request(c.Request)
		resp, err := r.structured(ctx, t, treq, c.Schema, i >= lastResort)
		if err == nil {
			res := &Result{Response: resp, Provider: t.be.Name, ProviderModel: t.spec.Model,
				Attempts: r.attempts, Latency: time.Since(r.start), TimeToFirstChunk: r.firstAt}
			if resp.Model != "" {
				res.ProviderModel = resp.Model
			}
			g.finish(ctx, r, t, resp, nil)
			return res, nil
		}
		var ce *clientError
		if errors.As(err, &ce) {
			g.finish(ctx, r, t, nil, err)
			return nil, llm.Errorf("", llm.KindCanceled, "client went away: %v", ce.err)
		}
		last, lastTarget = llm.AsError(err), t
		errs = append(errs, last)
		failures = append(failures, fmt.Sprintf("%s/%s: %s", t.be.Name, t.spec.Model, last.Error()))
		if !fallbackable(last) || r.forwarded || ctx.Err() != nil {
			break
		}
	}
	err := g.chainError(c.Logical, chain, failures, errs)
	if r.forwarded {
		// The caller holds part of an answer that will not be finished: say
		// so, since that is why nothing was retried.
		le := *llm.AsError(err)
		le.PartialSent = true
		err = &le
	}
	g.finish(ctx, r, lastTarget, nil, err)
	return nil, err
}

// finish records the call's metrics and closes its span's attributes.
func (g *Gateway) finish(ctx context.Context, r *run, t *target, resp *llm.Response, err error) {
	provider, model := "none", "none"
	if t != nil {
		provider, model = t.be.Name, t.spec.Model
	}
	r.span.SetAttributes(
		attribute.String("modelgateway.provider", provider),
		attribute.String("modelgateway.provider_model", model),
		attribute.Int("modelgateway.attempts", r.attempts),
	)
	g.inst.call(ctx, r.op, provider, model, r.logical, time.Since(r.start), err)
	if resp != nil {
		u := resp.Usage
		r.span.SetAttributes(
			attribute.Int64("modelgateway.usage.prompt_tokens", u.Prompt),
			attribute.Int64("modelgateway.usage.completion_tokens", u.Completion),
			attribute.Int64("modelgateway.usage.reasoning_tokens", u.Reasoning),
		)
		tenant := g.opts.Usage.Add(r.logical, provider, tenantOf(ctx), usage.Counts{Calls: 1, Prompt: u.Prompt, Completion: u.Completion, Reasoning: u.Reasoning})
		g.inst.usage(ctx, provider, model, r.logical, tenant, u)
		if r.sink != nil && r.forwarded {
			g.inst.firstToken(ctx, provider, model, r.logical, r.firstAt)
		}
	}
	if err != nil {
		r.span.RecordError(err)
		r.span.SetStatus(codes.Error, err.Error())
	}
}

// structured runs one target, enforcing the response format.
func (r *run) structured(ctx context.Context, t *target, req *llm.Request, schema *structured.Schema, lastResort bool) (*llm.Response, error) {
	if req.ResponseFormat.Type == llm.FormatText {
		return r.attempt(ctx, t, req, lastResort)
	}
	resp, err := r.jsonAttempt(ctx, t, req, lastResort)
	if err != nil {
		return nil, err
	}
	if len(resp.Message.ToolCalls) > 0 {
		return resp, r.emitContent(resp)
	}
	verr := validate(schema, resp.Message.Content)
	if verr == nil {
		resp.Message.Content = structured.Extract(resp.Message.Content)
		return resp, r.emitContent(resp)
	}
	r.span.AddEvent("repair", trace.WithAttributes(attribute.String("validation_error", verr.Error())))
	repair := *req
	repair.Messages = append(append([]llm.Message(nil), req.Messages...),
		llm.Message{Role: llm.RoleAssistant, Content: resp.Message.Content},
		llm.Message{Role: llm.RoleUser, Content: structured.RepairPrompt(req.ResponseFormat, verr)})
	fixed, err := r.jsonAttempt(ctx, t, &repair, lastResort)
	if err != nil {
		return nil, err
	}
	fixed.Usage.Add(resp.Usage)
	if len(fixed.Message.ToolCalls) == 0 {
		if verr2 := validate(schema, fixed.Message.Content); verr2 != nil {
			name := req.ResponseFormat.Name
			if schema != nil {
				name = schema.Name()
			}
			if name == "" {
				name = "JSON object"
			}
			return nil, &llm.Error{Provider: t.be.Name, Kind: llm.KindInvalidOutput,
				Message: fmt.Sprintf("answer for schema %q still invalid after one repair attempt: %s", name, verr2.Error()), Err: verr2}
		}
		fixed.Message.Content = structured.Extract(fixed.Message.Content)
	}
	return fixed, r.emitContent(fixed)
}

// blankRetries is how many times a blank JSON-mode answer is asked again.
const blankRetries = 2

// jsonAttempt is attempt, asking again when the content comes back blank
// with finish "stop" (DeepSeek's JSON mode does that).
func (r *run) jsonAttempt(ctx context.Context, t *target, req *llm.Request, lastResort bool) (*llm.Response, error) {
	var used llm.Usage
	for i := 0; ; i++ {
		resp, err := r.attempt(ctx, t, req, lastResort)
		if err != nil {
			return nil, err
		}
		resp.Usage.Add(used)
		if len(resp.Message.ToolCalls) > 0 || !structured.IsBlank(resp.Message.Content) || resp.Finish != llm.FinishStop {
			return resp, nil
		}
		if i == blankRetries {
			return resp, nil // validation reports the empty answer
		}
		used = resp.Usage
		r.span.AddEvent("blank_json_retry", trace.WithAttributes(attribute.String("provider", t.be.Name)))
	}
}

func validate(schema *structured.Schema, content string) error {
	if schema != nil {
		return schema.Validate(content)
	}
	return structured.ValidateObject(content)
}

// emitContent sends buffered structured content to a stream.
func (r *run) emitContent(resp *llm.Response) error {
	if r.sink == nil || resp.Message.Content == "" {
		return nil
	}
	if !r.forwarded {
		r.forwarded = true
		r.firstAt = time.Since(r.start)
	}
	if err := r.sink(llm.Event{Kind: llm.EventContent, Text: resp.Message.Content}); err != nil {
		return &clientError{err}
	}
	return nil
}

// attempt sends req to t, retrying retryable failures.
func (r *run) attempt(ctx context.Context, t *target, req *llm.Request, lastResort bool) (*llm.Response, error) {
	pol := r.g.opts.Retry
	max := pol.MaxAttempts
	if lastResort {
		max = 1
	}
	for n := 1; ; n++ {
		r.attempts++
		resp, err := r.once(ctx, t, req)
		r.g.inst.attempt(ctx, t.be.Name, t.spec.Model, r.logical, err)
		if err == nil {
			t.markUp()
			return resp, nil
		}
		var ce *clientError
		if errors.As(err, &ce) {
			return nil, err
		}
		le := llm.AsError(err)
		// Only a provider that cannot be reached is down. A cut answer
		// (llm.KindStreamCut) came from a provider that is up: one broken
		// answer does not send the next call elsewhere.
		if le.Kind == llm.KindConnection {
			t.markDown(le.Error())
		}
		if !le.Retryable() || n >= max || r.forwarded || ctx.Err() != nil {
			return nil, le
		}
		delay := backoff(pol, n)
		if le.RetryAfter > 0 {
			if le.RetryAfter > pol.MaxRetryAfter {
				return nil, le
			}
			delay = le.RetryAfter
		}
		r.span.AddEvent("retry", trace.WithAttributes(
			attribute.Int("attempt", n), attribute.String("provider", t.be.Name),
			attribute.String("error.kind", le.Kind.String()), attribute.Int("http.status", le.Status),
			attribute.String("delay", delay.String())))
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, le
		case <-timer.C:
		}
	}
}

// once makes one upstream request under the provider's concurrency limit.
func (r *run) once(ctx context.Context, t *target, req *llm.Request) (*llm.Response, error) {
	release, err := t.be.limiter.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if r.sink == nil {
		return t.be.Provider.Chat(ctx, req)
	}
	var col llm.Collector
	err = t.be.Provider.Stream(ctx, req, func(ev llm.Event) error {
		col.Add(ev)
		if ev.Kind == llm.EventEnd || (ev.Kind == llm.EventContent && r.buffer) {
			return nil
		}
		if !r.forwarded {
			r.forwarded = true
			r.firstAt = time.Since(r.start)
		}
		if err := r.sink(ev); err != nil {
			return &clientError{err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	resp := col.Response()
	resp.Model = req.Model
	return resp, nil
}

// backoff is the delay before retry n (1-based): BaseDelay·2^(n-1), capped,
// with jitter in [d/2, d].
func backoff(p RetryPolicy, n int) time.Duration {
	d := p.BaseDelay << (n - 1)
	if d > p.MaxDelay || d <= 0 {
		d = p.MaxDelay
	}
	half := d / 2
	return half + time.Duration(rand.Int64N(int64(half)+1))
}

// fallbackable reports whether the next target may succeed where this one
// failed: not for bad requests, invalid output, or a caller gone away.
func fallbackable(e *llm.Error) bool {
	switch e.Kind {
	case llm.KindInvalidRequest, llm.KindCanceled, llm.KindInvalidOutput, llm.KindInternal:
		return false
	}
	return true
}

// candidates orders a chain for a call: configured targets whose last probe
// did not fail, then (as a last resort, from index lastResort) configured
// targets whose probe failed.
func (g *Gateway) candidates(chain []*target) (out []*target, lastResort int) {
	var down []*target
	for _, t := range chain {
		if t.be.Provider == nil {
			continue
		}
		if st := t.status.Load(); st != nil && !st.ok {
			down = append(down, t)
			continue
		}
		out = append(out, t)
	}
	lastResort = len(out)
	return append(out, down...), lastResort
}

func (t *target) markUp() {
	if st := t.status.Load(); st == nil || !st.ok {
		t.status.Store(&probeStatus{ok: true})
	}
}

func (t *target) markDown(detail string) {
	t.status.Store(&probeStatus{ok: false, detail: detail})
}

func (g *Gateway) unknown(logical string) error {
	return &llm.Error{Kind: llm.KindUnknownModel,
		Message: fmt.Sprintf("unknown logical model %q; configured: %s", logical, strings.Join(g.names, ", "))}
}

// chainError builds the error of a call whose every target failed:
// Unavailable with how-to when no target could be reached at all; the single
// failure as it is; else the last failure's kind with every failure listed.
func (g *Gateway) chainError(logical string, chain []*target, failures []string, errs []*llm.Error) error {
	if len(errs) == 0 {
		return g.noProvider(logical, chain, nil)
	}
	last := errs[len(errs)-1]
	unreachable := true
	for _, e := range errs {
		if e.Kind != llm.KindConnection {
			unreachable = false
		}
	}
	if unreachable {
		return g.noProvider(logical, chain, failures)
	}
	if len(errs) == 1 {
		return last
	}
	return &llm.Error{Provider: last.Provider, Kind: last.Kind, Status: last.Status, RetryAfter: last.RetryAfter,
		Message: fmt.Sprintf("every provider for %q failed: %s", logical, strings.Join(failures, "; ")), Err: last}
}

// noProvider is the Unavailable error that says how to configure a provider.
func (g *Gateway) noProvider(logical string, chain []*target, failures []string) error {
	var parts []string
	for _, t := range chain {
		if t.be.Provider == nil {
			parts = append(parts, fmt.Sprintf("%s/%s: %s", t.be.Name, t.spec.Model, t.be.Unconfigured))
		}
	}
	parts = append(parts, failures...)
	if len(chain) == 0 {
		parts = append(parts, "the routing table gives it no provider")
	}
	msg := fmt.Sprintf("no working provider for logical model %q (%s)", logical, strings.Join(parts, "; "))
	if g.opts.HowTo != "" {
		msg += ". " + g.opts.HowTo
	}
	return &llm.Error{Kind: llm.KindUnavailable, Message: msg}
}

// EmbedResult is a successful embedding call.
type EmbedResult struct {
	Response                *llm.EmbedResponse
	Provider, ProviderModel string
	Attempts                int
}

// Usage returns the recorder that counts the calls' tokens per tenant.
func (g *Gateway) Usage() *usage.Recorder { return g.opts.Usage }

// Embed embeds inputs with the logical model's chain.
func (g *Gateway) Embed(ctx context.Context, logical string, req *llm.EmbedRequest) (*EmbedResult, error) {
	chain, ok := g.routes[logical]
	if !ok {
		return nil, g.unknown(logical)
	}
	ctx, span := g.tracer.Start(ctx, "modelgateway.embed", trace.WithAttributes(attribute.String("modelgateway.logical_model", logical)))
	defer span.End()
	r := &run{g: g, op: "embed", logical: logical, span: span, start: time.Now()}
	cands, lastResort := g.candidates(chain)
	var failures []string
	var errs []*llm.Error
	var lastTarget *target
	for i, t := range cands {
		treq := *req
		treq.Model = t.spec.Model
		max := g.opts.Retry.MaxAttempts
		if i >= lastResort {
			max = 1
		}
		resp, err := r.embedOnce(ctx, t, &treq, max)
		if err == nil {
			g.finish(ctx, r, t, &llm.Response{Usage: resp.Usage}, nil)
			return &EmbedResult{Response: resp, Provider: t.be.Name, ProviderModel: t.spec.Model, Attempts: r.attempts}, nil
		}
		last := llm.AsError(err)
		lastTarget = t
		errs = append(errs, last)
		failures = append(failures, fmt.Sprintf("%s/%s: %s", t.be.Name, t.spec.Model, last.Error()))
		if !fallbackable(last) || ctx.Err() != nil {
			break
		}
	}
	err := g.chainError(logical, chain, failures, errs)
	g.finish(ctx, r, lastTarget, nil, err)
	return nil, err
}

func (r *run) embedOnce(ctx context.Context, t *target, req *llm.EmbedRequest, max int) (*llm.EmbedResponse, error) {
	for n := 1; ; n++ {
		r.attempts++
		release, err := t.be.limiter.Acquire(ctx)
		var resp *llm.EmbedResponse
		if err == nil {
			resp, err = t.be.Provider.Embed(ctx, req)
			release()
		}
		r.g.inst.attempt(ctx, t.be.Name, t.spec.Model, r.logical, err)
		if err == nil {
			t.markUp()
			return resp, nil
		}
		le := llm.AsError(err)
		if le.Kind == llm.KindConnection {
			t.markDown(le.Error())
		}
		if !le.Retryable() || n >= max || ctx.Err() != nil {
			return nil, le
		}
		delay := backoff(r.g.opts.Retry, n)
		if le.RetryAfter > 0 {
			if le.RetryAfter > r.g.opts.Retry.MaxRetryAfter {
				return nil, le
			}
			delay = le.RetryAfter
		}
		r.span.AddEvent("retry", trace.WithAttributes(attribute.Int("attempt", n), attribute.String("provider", t.be.Name),
			attribute.String("error.kind", le.Kind.String()), attribute.String("delay", delay.String())))
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, le
		case <-timer.C:
		}
	}
}

// TargetStatus is one target's availability.
type TargetStatus struct {
	Provider, Model string
	Available       bool
	Detail          string
}

// ModelStatus is one logical model's availability.
type ModelStatus struct {
	Name      string
	Available bool
	Targets   []TargetStatus
}

// Models reports every logical model, sorted by name: a target is available
// when its provider is configured and its last probe (or call) succeeded.
func (g *Gateway) Models() []ModelStatus {
	out := make([]ModelStatus, 0, len(g.names))
	for _, name := range g.names {
		ms := ModelStatus{Name: name}
		for _, t := range g.routes[name] {
			ts := TargetStatus{Provider: t.be.Name, Model: t.spec.Model}
			switch st := t.status.Load(); {
			case t.be.Provider == nil:
				ts.Detail = t.be.Unconfigured
			case st == nil:
				ts.Detail = "not checked yet"
			case st.ok:
				ts.Available = true
			default:
				ts.Detail = st.detail
			}
			ms.Available = ms.Available || ts.Available
			ms.Targets = append(ms.Targets, ts)
		}
		out = append(out, ms)
	}
	return out
}

// Probe checks every configured target once, concurrently, and records the
// results.
func (g *Gateway) Probe(ctx context.Context) {
	type key struct{ provider, model string }
	groups := map[key][]*target{}
	for _, name := range g.names {
		for _, t := range g.routes[name] {
			if t.be.Provider != nil {
				k := key{t.be.Name, t.spec.Model}
				groups[k] = append(groups[k], t)
			}
		}
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].provider+keys[i].model < keys[j].provider+keys[j].model })
	done := make(chan struct{}, len(keys))
	for _, k := range keys {
		go func() {
			defer func() { done <- struct{}{} }()
			ts := groups[k]
			pctx, cancel := context.WithTimeout(ctx, g.opts.ProbeTimeout)
			err := ts[0].be.Provider.Probe(pctx, k.model)
			cancel()
			if ctx.Err() != nil {
				return
			}
			st := &probeStatus{ok: err == nil}
			if err != nil {
				st.detail = llm.AsError(err).Error()
			}
			for _, t := range ts {
				prev := t.status.Swap(st)
				if prev == nil || prev.ok != st.ok {
					g.log.Info("model target availability", "logical_targets", len(ts), "provider", k.provider,
						"model", k.model, "available", st.ok, "detail", st.detail)
				}
			}
		}()
	}
	for range keys {
		<-done
	}
}

// RunProbes probes at once and then every ProbeInterval until ctx ends.
func (g *Gateway) RunProbes(ctx context.Context) {
	g.Probe(ctx)
	tick := time.NewTicker(g.opts.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			g.Probe(ctx)
		}
	}
}
