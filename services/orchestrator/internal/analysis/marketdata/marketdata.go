// Package marketdata provides the get_stock_price and get_financials tools,
// backed by a market-data HTTP endpoint (MARKET_DATA_URL). The endpoint
// speaks this small contract:
//
//	GET {base}/v1/quote?ticker=BHP[&period=1d]                → 200 JSON object
//	GET {base}/v1/financials?ticker=BHP[&report_type=annual]  → 200 JSON object
//
// 404 means the endpoint has no data for the ticker: the tool returns an
// empty result, which the analysis reports as a data gap. Any other non-2xx
// status, a body that is not a JSON object, a timeout or a connection error
// fails the tool job with a message naming what went wrong. With an API key
// configured, requests carry "Authorization: Bearer <key>".
package marketdata

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentmesh/agentmesh/libs/utf8x"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis/tools"
)

// Tool names.
const (
	ToolStockPrice = "get_stock_price"
	ToolFinancials = "get_financials"
)

// maxBody bounds a response body.
const maxBody = 1 << 20

// StockPriceDefinition is what the planner sees of get_stock_price.
var StockPriceDefinition = tools.Definition{
	Name:        ToolStockPrice,
	Description: "Get the current price (value, currency, time of quote) and recent price history of a listed stock.",
	Parameters: json.RawMessage(`{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"ticker": {"type": "string", "pattern": "^[A-Za-z0-9.\\-]{1,12}$", "description": "Ticker symbol, e.g. BHP"},
			"period": {"type": "string", "enum": ["1d", "5d", "1m", "3m", "1y"], "description": "History period; default 1d"}
		},
		"required": ["ticker"]
	}`),
}

// FinancialsDefinition is what the planner sees of get_financials.
var FinancialsDefinition = tools.Definition{
	Name:        ToolFinancials,
	Description: "Get financial statements and ratios of a listed company: revenue, net income, EPS, P/E ratio, market capitalisation, dividend yield.",
	Parameters: json.RawMessage(`{
		"type": "object",
		"additionalProperties": false,
		"properties": {
			"ticker": {"type": "string", "pattern": "^[A-Za-z0-9.\\-]{1,12}$", "description": "Ticker symbol, e.g. BHP"},
			"report_type": {"type": "string", "enum": ["quarterly", "annual"], "description": "Reporting period; default annual"}
		},
		"required": ["ticker"]
	}`),
}

// Client calls the market-data endpoint. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	apiKey string
	http   *http.Client
}

// New returns a client for the endpoint at baseURL. apiKey may be empty.
// httpClient nil means a client without its own timeout (the engine bounds
// every execution).
func New(baseURL, apiKey string, httpClient *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("marketdata: MARKET_DATA_URL must be an http(s) URL")
	}
	if httpClient == nil {
		httpClient = &http.Client{}
	}
	return &Client{base: u, apiKey: apiKey, http: httpClient}, nil
}

// Register defines both tools in reg and registers this client as their
// executor.
func (c *Client) Register(reg *tools.Registry) error {
	for _, t := range []struct {
		def  tools.Definition
		path string
		opt  string
	}{
		{StockPriceDefinition, "/v1/quote", "period"},
		{FinancialsDefinition, "/v1/financials", "report_type"},
	} {
		if err := reg.Define(t.def); err != nil {
			return err
		}
		if err := reg.Handle(t.def.Name, c.executor(t.path, t.opt)); err != nil {
			return err
		}
	}
	return nil
}

// executor returns an executor that GETs path with the ticker and the
// optional argument opt as query parameters.
func (c *Client) executor(path, opt string) tools.Executor {
	return tools.ExecutorFunc(func(ctx context.Context, call tools.Call) (tools.Result, error) {
		var args map[string]string
		if err := json.Unmarshal(call.Args, &args); err != nil {
			return tools.Result{}, fmt.Errorf("arguments: %w", err)
		}
		q := url.Values{"ticker": {strings.ToUpper(args["ticker"])}}
		if v := args[opt]; v != "" {
			q.Set(opt, v)
		}
		return c.get(ctx, path, q)
	})
}

// get performs one request and interprets the response.
func (c *Client) get(ctx context.Context, path string, q url.Values) (tools.Result, error) {
	u := *c.base
	u.Path += path
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return tools.Result{}, fmt.Errorf("market data: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return tools.Result{}, fmt.Errorf("market data: %w", ctx.Err())
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the job already; keep the cause
		}
		return tools.Result{}, fmt.Errorf("market data unreachable: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return tools.Result{}, fmt.Errorf("market data: read response: %w", err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return tools.Result{}, nil
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return tools.Result{}, fmt.Errorf("market data returned HTTP %d: %s", resp.StatusCode, snippet(body))
	case len(body) > maxBody:
		return tools.Result{}, fmt.Errorf("market data response larger than %d bytes", maxBody)
	}
	var obj map[string]any
	if err := json.Unmarshal(body, &obj); err != nil {
		return tools.Result{}, fmt.Errorf("market data returned a body that is not a JSON object: %s", snippet(body))
	}
	return tools.Result{Data: json.RawMessage(body)}, nil
}

// snippet shortens a body for an error message.
func snippet(b []byte) string {
	s := utf8x.Valid(strings.TrimSpace(string(b))) // an error page in any charset
	if len(s) > 200 {
		s = utf8x.Prefix(s, 200) + "…"
	}
	return s
}
