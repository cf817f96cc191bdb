package openaiapi

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/agentmesh/agentmesh/libs/frontdoor"
	modelv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/model/v1"
	"github.com/agentmesh/agentmesh/libs/grpcx"
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
	// Replicas is how many replicas' counts the report holds;
	// ReplicasUnanswered, how many were asked and did not answer.
	Replicas           int `json:"replicas"`
	ReplicasUnanswered int `json:"replicas_unanswered"`
}

// replicaHeader asks a replica for its own counts only: the question one
// replica puts to the others when it sums them.
const replicaHeader = "X-Agentmesh-Usage-Replica"

// peerUsageTimeout bounds the question to one replica; one that does not
// answer in time counts as unanswered.
const peerUsageTimeout = 5 * time.Second

// usageReport serves GET /usage: the caller's tenant's usage through this
// API, by key and model (a key bound to a project: the usage of its
// project's keys; an operator key, which has no tenant: every tenant's,
// each row naming its tenant), since the replicas started. With Peers,
// every replica's counts summed; else this replica's.
func (h *Handler) usageReport(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, h.usageOf(r))
}

// usageOf is the report GET /usage answers r with: every replica's counts
// summed when there are peers to ask, else this replica's.
func (h *Handler) usageOf(r *http.Request) *usageReport {
	c := h.caller(r)
	if h.opts.Peers == nil || r.Header.Get(replicaHeader) != "" {
		return h.usage.report(c)
	}
	peers, err := h.opts.Peers(r.Context())
	if err != nil {
		h.opts.Log.Warn("usage: cannot list the replicas; answering for this one", "err", err)
	}
	if len(peers) < 2 {
		return h.usage.report(c)
	}
	// The replica asked has authenticated the caller; one that refuses
	// the same key (keys changing, pods rolling) counts as unanswered.
	answers := make([]*usageReport, len(peers))
	var wg sync.WaitGroup
	for i, peer := range peers {
		wg.Go(func() { answers[i] = h.askReplica(r, peer) })
	}
	wg.Wait()
	var got []*usageReport
	for _, a := range answers {
		if a != nil {
			got = append(got, a)
		}
	}
	if len(got) == 0 {
		own := h.usage.report(c)
		own.ReplicasUnanswered = len(peers) - 1
		return own
	}
	return sumReports(got, len(peers)-len(got))
}

// askReplica asks the replica at base for its own counts, as the caller
// of r; nil when it did not answer them.
func (h *Handler) askReplica(r *http.Request, base string) *usageReport {
	ctx, cancel := context.WithTimeout(r.Context(), peerUsageTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+Prefix+"/usage", nil)
	if err != nil {
		h.opts.Log.Warn("usage: a replica's address", "replica", base, "err", err)
		return nil
	}
	// Whatever names the caller travels on: its key, or in the open
	// development mode the headers that stand for one.
	if key := frontdoor.Credential(r.Context()); key != "" {
		req.Header.Set(frontdoor.APIKeyHeader, key)
	}
	for _, k := range []string{frontdoor.TenantHeader, frontdoor.ProjectHeader, frontdoor.CallerHeader, "X-Request-Id"} {
		if v := r.Header.Values(k); len(v) > 0 {
			req.Header[k] = v
		}
	}
	req.Header.Set(replicaHeader, "1")
	resp, err := peerClient.Do(req)
	if err != nil {
		h.opts.Log.Warn("usage: a replica did not answer", "replica", base, "err", err)
		return nil
	}
	defer resp.Body.Close()
	var rep usageReport
	if resp.StatusCode != http.StatusOK {
		h.opts.Log.Warn("usage: a replica failed", "replica", base, "http_status", resp.StatusCode)
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&rep); err != nil {
		h.opts.Log.Warn("usage: a replica's answer", "replica", base, "err", err)
		return nil
	}
	return &rep
}

// peerClient asks the replicas; plain HTTP inside the cluster, as the
// gateways listen.
var peerClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}}

// report is the caller c's usage counted by this replica.
func (l *ledger) report(c Caller) *usageReport {
	operator := c.Tenant == ""
	out := &usageReport{Object: "list", Tenant: c.Tenant, Since: l.since.UTC().Format(time.RFC3339), Data: []usageRow{}, Replicas: 1}
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
	sortRows(out.Data)
	return out
}

func sortRows(rows []usageRow) {
	slices.SortFunc(rows, func(a, b usageRow) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Model, b.Model))
	})
}

// sumReports adds up the reports of several replicas: the rows of the same
// tenant, key and model summed, since the earliest start.
func sumReports(reports []*usageReport, unanswered int) *usageReport {
	out := &usageReport{Object: "list", Tenant: reports[0].Tenant, Since: reports[0].Since, Data: []usageRow{}, ReplicasUnanswered: unanswered}
	type key struct{ tenant, key, model string }
	sums := map[key]int{} // index in out.Data
	for _, rep := range reports {
		if rep.Since < out.Since { // RFC 3339 in UTC: ordered as text
			out.Since = rep.Since
		}
		out.Replicas += max(rep.Replicas, 1)
		for _, row := range rep.Data {
			k := key{row.Tenant, row.Key, row.Model}
			i, ok := sums[k]
			if !ok {
				sums[k] = len(out.Data)
				out.Data = append(out.Data, row)
				continue
			}
			s := &out.Data[i]
			s.Requests += row.Requests
			s.PromptTokens += row.PromptTokens
			s.CompletionTokens += row.CompletionTokens
			s.ReasoningTokens += row.ReasoningTokens
			s.TotalTokens += row.TotalTokens
		}
	}
	sortRows(out.Data)
	return out
}

// DNSPeers returns Options.Peers for targets, comma-separated host:port
// names each resolving to one or more replicas (a Kubernetes headless
// Service to its pods; or a static list of hosts); each replica is asked
// over plain HTTP. Blank targets are no peers: nil.
func DNSPeers(targets string) func(context.Context) ([]string, error) {
	if strings.TrimSpace(strings.ReplaceAll(targets, ",", "")) == "" {
		return nil
	}
	return func(ctx context.Context) ([]string, error) {
		var out []string
		for target := range strings.SplitSeq(targets, ",") {
			if target = strings.TrimSpace(target); target == "" {
				continue
			}
			eps, err := grpcx.Endpoints(ctx, target)
			if err != nil {
				return nil, err
			}
			for _, ep := range eps {
				out = append(out, "http://"+ep)
			}
		}
		slices.Sort(out)
		return slices.Compact(out), nil
	}
}
