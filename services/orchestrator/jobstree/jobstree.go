// Package jobstree renders an analysis job tree for terminals, as
// `agentmesh jobs tree <id>` prints it:
//
//	▼ Analysis: "Analyse BHP for investment" [complete] 2.3s
//	  ├─ Planning [complete] 0.8s  → get_stock_price, get_financials
//	  ├─ Tool: get_stock_price {ticker: "BHP"} [complete] 0.4s
//	  ├─ Tool: get_financials {ticker: "BHP", report_type: "quarterly"} [complete] 0.6s
//	  └─ Synthesis [complete] 0.5s
package jobstree

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	orchestratorv1 "github.com/agentmesh/agentmesh/libs/gen/agentmesh/orchestrator/v1"
)

// maxTitle bounds the query shown on the analysis line, in characters.
const maxTitle = 100

// Print writes job and its children (GetJob's tree) to w, one line per job:
// a label, the status in brackets and the duration. The analysis's duration
// runs from its creation to its end; a child's from its start to its end;
// an unfinished job shows the time so far. The planning line lists the tools
// it chose; a failed job's line ends with its error.
func Print(w io.Writer, job *orchestratorv1.Job) error {
	return render(w, job, time.Now())
}

func render(w io.Writer, job *orchestratorv1.Job, now time.Time) error {
	var b strings.Builder
	b.WriteString("▼ " + line(job, now) + "\n")
	for i, c := range job.GetChildren() {
		branch := "├─ "
		if i == len(job.GetChildren())-1 {
			branch = "└─ "
		}
		b.WriteString("  " + branch + line(c, now) + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// line renders one job without the tree drawing.
func line(j *orchestratorv1.Job, now time.Time) string {
	var b strings.Builder
	b.WriteString(label(j))
	b.WriteString(" [" + status(j.GetStatus()) + "]")
	if d, ok := duration(j, now); ok {
		b.WriteString(" " + d)
	}
	if j.GetType() == orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL {
		if names := plannedTools(j); len(names) > 0 {
			b.WriteString("  → " + strings.Join(names, ", "))
		}
	}
	if j.GetStatus() == orchestratorv1.JobStatus_JOB_STATUS_FAILED && j.GetError() != "" {
		b.WriteString("  ✗ " + oneLine(j.GetError()))
	}
	return b.String()
}

// label names a job by its type.
func label(j *orchestratorv1.Job) string {
	switch j.GetType() {
	case orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST:
		return "Analysis: " + strconv.Quote(truncate(oneLine(j.GetTitle()), maxTitle))
	case orchestratorv1.JobType_JOB_TYPE_PLANNING_CALL:
		return "Planning"
	case orchestratorv1.JobType_JOB_TYPE_TOOL_EXECUTION:
		title := j.GetTitle()
		if title == "" {
			title = j.GetToolName()
		}
		return "Tool: " + title
	case orchestratorv1.JobType_JOB_TYPE_SYNTHESIS:
		return "Synthesis"
	}
	return "Job " + j.GetId()
}

// status is the lower-case status name: complete, waiting_for_children, ...
func status(s orchestratorv1.JobStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "JOB_STATUS_"))
}

// duration renders how long the job took (or has taken so far).
func duration(j *orchestratorv1.Job, now time.Time) (string, bool) {
	start := j.GetStartTime()
	if j.GetType() == orchestratorv1.JobType_JOB_TYPE_ANALYSIS_REQUEST {
		start = j.GetCreateTime()
	}
	if start == nil {
		return "", false
	}
	end := now
	if j.GetEndTime() != nil {
		end = j.GetEndTime().AsTime()
	}
	d := end.Sub(start.AsTime())
	if d < 0 {
		d = 0
	}
	if d < time.Minute {
		return fmt.Sprintf("%.1fs", d.Seconds()), true
	}
	return d.Round(time.Second).String(), true
}

// plannedTools returns the tool names of a planning job's output.
func plannedTools(j *orchestratorv1.Job) []string {
	var names []string
	for _, v := range j.GetOutput().GetFields()["tool_calls"].GetListValue().GetValues() {
		if n := v.GetStructValue().GetFields()["name"].GetStringValue(); n != "" {
			names = append(names, n)
		}
	}
	return names
}

// oneLine folds line breaks into spaces.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// truncate cuts s to n characters with "…".
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
