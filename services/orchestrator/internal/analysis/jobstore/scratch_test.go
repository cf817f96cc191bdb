package jobstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

const scratchOut = `{"data":{"ticker":"BHP","report_type":"quarterly","pe_ratio":11.2,"market_cap":230000000000,"dividend_yield":0.051}}`
const scratchSynth = `{"ticker":"BHP","summary":"BHP trades at 45.10 AUD with a P/E of 11.2 and a 5.1% dividend yield.","current_price":{"value":45.1,"currency":"AUD","as_of":"2025-03-14T06:00:00Z"},"metrics":{"pe_ratio":11.2,"market_cap":2.3e11,"dividend_yield":0.051},"data_sources":["get_stock_price","get_financials"],"data_gaps":[]}`

func mkJob(i int) *analysis.Job {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o := scratchOut
	if i%5 == 0 {
		o = scratchSynth
	}
	return &analysis.Job{ID: fmt.Sprintf("%08d-aaaa-bbbb-cccc-dddddddddddd", i), RootID: "r", ParentID: "p", Type: analysis.TypeTool, Status: analysis.StatusComplete,
		Tenant: "acme", Project: "research", Title: `get_financials {ticker: "BHP", report_type: "quarterly"}`, ToolName: "get_financials",
		InputJSON: `{"report_type":"quarterly","ticker":"BHP"}`, OutputJSON: o, IdempotencyKey: "r/get_financials/" + strings.Repeat("ab", 32),
		CreateTime: now, StartTime: &now, EndTime: &now, UpdateTime: now, Version: 3}
}
