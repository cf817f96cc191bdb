package openaiapi

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
)

const (
	// maxCallers bounds the distinct (tenant, key) label pairs. With API
	// keys configured there are as many as keys; in the open development
	// mode tenants and callers come from request headers, so past this
	// many the rest are counted as overflowLabel.
	maxCallers    = 1000
	overflowLabel = "_other"
	// anonymous is the key label of a request that names no caller.
	anonymous = "anonymous"
)

// usageKey is one row of the ledger. Model is a logical model that served
// a successful call, so it is one of the configured few.
type usageKey struct{ tenant, project, key, model string }

// usageTotals are a row's counts.
type usageTotals struct {
	requests, prompt, completion, reasoning, total int64
}

// ledger meters token usage per tenant, key and model: Prometheus counters
// (through OpenTelemetry), and totals that GET /usage reports.
type ledger struct {
	tokens   metric.Int64Counter
	requests metric.Int64Counter
	since    time.Time

	mu      sync.Mutex
	rows    map[usageKey]*usageTotals // guarded by mu
	callers map[[2]string]bool        // guarded by mu: label pairs seen
	// attribute sets by label values, guarded by mu
	tokenAttrs   map[tokenKey]metric.AddOption
	requestAttrs map[requestKey]metric.AddOption
}

func newLedger(mp metric.MeterProvider) (*ledger, error) {
	m := mp.Meter("github.com/agentmesh/agentmesh/services/modelgateway/openaiapi")
	tokens, err := m.Int64Counter("agentmesh.gateway.openai.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens used through the OpenAI-compatible API, by tenant, API key, logical model and kind (prompt, completion, reasoning)."))
	if err != nil {
		return nil, err
	}
	requests, err := m.Int64Counter("agentmesh.gateway.openai.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Requests to the OpenAI-compatible API, by tenant, API key, endpoint and HTTP status."))
	if err != nil {
		return nil, err
	}
	return &ledger{tokens: tokens, requests: requests, since: time.Now(), rows: map[usageKey]*usageTotals{},
		callers:    map[[2]string]bool{},
		tokenAttrs: map[tokenKey]metric.AddOption{}, requestAttrs: map[requestKey]metric.AddOption{}}, nil
}

// labels returns c's tenant and key labels, folded into overflowLabel
// once maxCallers pairs are known. l.mu must be held.
func (l *ledger) labels(c Caller) (tenant, key string) {
	tenant, key = c.Tenant, c.Key
	if key == "" {
		key = anonymous
	}
	pair := [2]string{tenant, key}
	if l.callers[pair] {
		return tenant, key
	}
	if len(l.callers) >= maxCallers {
		return overflowLabel, overflowLabel
	}
	l.callers[pair] = true
	return tenant, key
}

// tokenKey and requestKey are the label values of the two counters.
type (
	tokenKey   struct{ tenant, key, model, kind string }
	requestKey struct {
		tenant, key, endpoint string
		status                int
	}
)

// option returns the attribute set cached in m for k, building it with kv
// the first time: building one per measurement would allocate on every
// call, and so would the attributes, which is why kv is a function (and m
// is typed: a key boxed in an interface would allocate too). The ledger's
// mu must be held.
func option[K comparable](m map[K]metric.AddOption, k K, kv func() []attribute.KeyValue) metric.AddOption {
	if o, ok := m[k]; ok {
		return o
	}
	o := metric.WithAttributes(kv()...)
	m[k] = o
	return o
}

// add records a successful call's usage.
func (l *ledger) add(c Caller, model string, u *modelv1.Usage) {
	total := u.GetTotalTokens()
	if total == 0 {
		total = u.GetPromptTokens() + u.GetCompletionTokens()
	}
	l.mu.Lock()
	tenant, key := l.labels(c)
	uk := usageKey{tenant, c.Project, key, model}
	row := l.rows[uk]
	if row == nil {
		row = &usageTotals{}
		l.rows[uk] = row
	}
	row.requests++
	row.prompt += u.GetPromptTokens()
	row.completion += u.GetCompletionTokens()
	row.reasoning += u.GetReasoningTokens()
	row.total += total
	var opts [3]metric.AddOption
	for i, kind := range []string{"prompt", "completion", "reasoning"} {
		opts[i] = option(l.tokenAttrs, tokenKey{tenant, key, model, kind}, func() []attribute.KeyValue {
			return []attribute.KeyValue{attribute.String("tenant", tenant), attribute.String("key", key),
				attribute.String("model", model), attribute.String("kind", kind)}
		})
	}
	l.mu.Unlock()
	ctx := context.Background()
	for i, n := range []int64{u.GetPromptTokens(), u.GetCompletionTokens(), u.GetReasoningTokens()} {
		if n > 0 {
			l.tokens.Add(ctx, n, opts[i])
		}
	}
}

// count records one request to endpoint with its HTTP status.
func (l *ledger) count(c Caller, endpoint string, httpStatus int) {
	l.mu.Lock()
	tenant, key := l.labels(c)
	opt := option(l.requestAttrs, requestKey{tenant, key, endpoint, httpStatus}, func() []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("tenant", tenant), attribute.String("key", key),
			attribute.String("endpoint", endpoint), attribute.Int("http_status", httpStatus)}
	})
	l.mu.Unlock()
	l.requests.Add(context.Background(), 1, opt)
}

// count records a request to endpoint that ended with err (nil: 200).
func (h *Handler) count(r *http.Request, endpoint string, err error) {
	code := http.StatusOK
	if err != nil {
		code = failureOf(err).status
	}
	h.usage.count(h.caller(r), endpoint, code)
}

// usageRow is one row of GET /usage.
type usageRow struct {
	Object string `json:"object"`
	// Tenant is set in an operator's report, which holds every tenant's.
	Tenant           string `json:"tenant,omitempty"`
	Key              string `json:"key"`
	Model            string `json:"model"`
	Requests         int64  `json:"requests"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
	ReasoningTokens  int64  `json:"reasoning_tokens"`
	TotalTokens      int64  `json:"total_tokens"`
}

type usageReport struct {
	Object string     `json:"object"`
	Tenant string     `json:"tenant"`
	Since  string     `json:"since"`
	Data   []usageRow `json:"data"`
}

// usageReport serves GET /usage: the caller's tenant's usage through this
// API since this gateway replica started, by key and model (a key bound to
// a project: the usage of its project's keys; an operator key, which has
// no tenant: every tenant's, each row naming its tenant). Across
// replicas, the Prometheus counters are the sum.
func (h *Handler) usageReport(w http.ResponseWriter, r *http.Request) {
	c := h.caller(r)
	operator := c.Tenant == ""
	l := h.usage
	out := usageReport{Object: "list", Tenant: c.Tenant, Since: l.since.UTC().Format(time.RFC3339), Data: []usageRow{}}
	l.mu.Lock()
	for k, t := range l.rows {
		if !operator && (k.tenant != c.Tenant || (c.Project != "" && k.project != c.Project)) {
			continue // another tenant's, or another project's (of a project's key)
		}
		row := usageRow{Object: "usage", Key: k.key, Model: k.model, Requests: t.requests,
			PromptTokens: t.prompt, CompletionTokens: t.completion, ReasoningTokens: t.reasoning, TotalTokens: t.total}
		if operator {
			row.Tenant = k.tenant
		}
		out.Data = append(out.Data, row)
	}
	l.mu.Unlock()
	slices.SortFunc(out.Data, func(a, b usageRow) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Model, b.Model))
	})
	writeJSON(w, out)
}
