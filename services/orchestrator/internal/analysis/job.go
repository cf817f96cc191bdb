// Package analysis runs analysis jobs: a planning call in which the model
// may only choose tools, one tool_execution job per chosen call executed by
// Go code from a JetStream work queue, and a synthesis call constrained by a
// JSON schema that formats only what the tools returned.
//
// # State
//
// Every job is one MongoDB document. Every state change is one
// single-document, version-checked write that also appends the job event
// (am.evt.<tenant>.job.<root>.<id>.<state>, see JobEventSubject; payload
// orchestratorv1.JobEvent) and, where the change makes the job runnable, its
// work item (am.work.analysis.*) to the document's outbox; the events relay
// publishes them. So a state change, its event and its work item are stored
// together or not at all.
//
// The parent (analysis_request) holds no progress of its own: [Engine.advance]
// derives what must happen next from the stored children (create the
// planning job, create the planned tool jobs, create or re-run synthesis,
// settle the parent) and does it idempotently — child ids are derived from
// the parent id and, for tool jobs, the idempotency key, so a repeated step
// creates nothing twice, and the children are read by those ids, never
// queried. advance runs after every child settles, after CancelJob and
// RetryJob, and for every unfinished analysis at start-up, which is the
// whole of crash recovery for parents.
//
// A finished analysis — its events published — is moved with its children
// to the store's archive shortly after (see archive.go), where reads still
// find it: the store's working set, and with it the cost of every step on
// the embedded FerretDB, follows the analyses in flight rather than the
// history.
//
// # Executing
//
// A worker claims a job with a conditional write (pending, or running with
// a lapsed claim → running under its own claim), renews the claim every
// ClaimTTL/3 while it runs (a claim lasts seconds, a model call may take
// minutes; see claim.go), records the result with a write that only
// succeeds while it still holds the claim, and only then acknowledges the
// work item. A job that is complete, failed or cancelled is never claimed
// again, so a completed tool is never executed twice, whatever is
// redelivered after a crash. Every ClaimTTL/3 each engine puts the jobs
// whose claim lapsed (their worker died) back to pending with a new work
// item, so a killed worker's job runs again within seconds. A periodic
// sweep re-queues pending jobs whose work item was lost, and archives
// finished analyses the archiver missed; it looks only at the live set, so
// it costs the same however long the history.
package analysis

import (
	"slices"
	"time"
)

// Type is what a job does.
type Type string

// Job types.
const (
	// TypeAnalysis is the parent of an analysis.
	TypeAnalysis Type = "analysis_request"
	// TypePlanning is the model choosing tool calls.
	TypePlanning Type = "planning_call"
	// TypeTool is one tool executed by Go code.
	TypeTool Type = "tool_execution"
	// TypeSynthesis is the model formatting the tool results.
	TypeSynthesis Type = "synthesis"
)

// Status is where a job is in its life.
type Status string

// Job statuses.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusWaiting   Status = "waiting_for_children"
	StatusComplete  Status = "complete"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s is final: complete, failed or cancelled. Only
// RetryJob moves a job out of a final status.
func (s Status) Terminal() bool {
	return s == StatusComplete || s == StatusFailed || s == StatusCancelled
}

// Job is one node of an analysis tree as stored. Inputs and outputs are JSON
// texts, so tool arguments and results with any keys survive storage. The
// fields that are empty in most jobs and that no query asks to be empty
// are omitempty: about half of a job's fields are empty, and the embedded
// store (FerretDB) parses and rewrites a whole document, with a type entry
// per field, at every update. An update unsets the omitempty fields it
// leaves empty (jobstore), so clearing one (an error, a lease) still
// clears it. The fields queries filter on by equality (project_id may be
// "") are always written.
type Job struct {
	// ID is the job id. Children's ids are derived from the parent id
	// (see childID), which makes creating them idempotent.
	ID string `bson:"_id"`
	// RootID is the analysis job id; equal to ID for the analysis itself.
	RootID string `bson:"root_id"`
	// ParentID is empty for the analysis.
	ParentID string `bson:"parent_id,omitempty"`
	// Type and Status.
	Type   Type   `bson:"type"`
	Status Status `bson:"status"`
	// Tenant and Project scope every read and write.
	Tenant  string `bson:"tenant_id"`
	Project string `bson:"project_id"`
	// Seq orders siblings: planning 0, tools 1..n, synthesis n+1.
	Seq int `bson:"seq"`
	// Title is a human label: the query, or the tool call as the model
	// wrote it.
	Title string `bson:"title"`
	// ToolName is set on tool jobs.
	ToolName string `bson:"tool_name,omitempty"`
	// InputJSON and OutputJSON are JSON objects (or empty).
	InputJSON  string `bson:"input_json"`
	OutputJSON string `bson:"output_json,omitempty"`
	// Error is set on failed jobs.
	Error string `bson:"error,omitempty"`
	// Attempts counts claims (executions started).
	Attempts int32 `bson:"attempts,omitempty"`
	// IdempotencyKey of a tool job: parent, tool, canonical arguments.
	IdempotencyKey string `bson:"idempotency_key,omitempty"`
	// Times. StartTime is the first claim; EndTime the last settle.
	CreateTime time.Time  `bson:"create_time"`
	StartTime  *time.Time `bson:"start_time,omitempty"`
	EndTime    *time.Time `bson:"end_time,omitempty"`
	// UpdateTime is the time of the last write; the sweep looks at jobs
	// that have not moved for a while.
	UpdateTime time.Time `bson:"update_time"`
	// Version increments on every write (optimistic concurrency).
	Version int64 `bson:"version"`
	// LeaseOwner and LeaseUntil are the claim: which execution runs the
	// job, and until when unless it is renewed.
	LeaseOwner string     `bson:"lease_owner,omitempty"`
	LeaseUntil *time.Time `bson:"lease_until,omitempty"`
	// Dispatches counts work items published for the job; the next one's
	// message id uses it, so a relay re-publish is deduplicated and a
	// deliberate re-queue is not.
	Dispatches int32 `bson:"dispatches,omitempty"`
	// Round is the synthesis round a tool or synthesis job belongs to;
	// RetryJob raises it so synthesis runs again over the retried result.
	Round int32 `bson:"round,omitempty"`

	// Analysis jobs only.
	Query        string   `bson:"query,omitempty"`
	ResponseType string   `bson:"response_type,omitempty"`
	OutputSchema string   `bson:"output_schema,omitempty"`
	AllowedTools []string `bson:"allowed_tools,omitempty"`

	// Plan is the planning job's validated tool calls.
	Plan []PlannedCall `bson:"plan,omitempty"`
}

// PlannedCall is one tool call chosen by planning.
type PlannedCall struct {
	// Tool is the tool name.
	Tool string `bson:"tool"`
	// Args is the canonical arguments object.
	Args string `bson:"args"`
	// Title is the call as the model wrote it, for people.
	Title string `bson:"title"`
	// Key is the idempotency key.
	Key string `bson:"key"`
}

// clone returns a deep copy of j, so a failed write leaves no trace.
func (j *Job) clone() *Job {
	c := *j
	c.AllowedTools = slices.Clone(j.AllowedTools)
	c.Plan = slices.Clone(j.Plan)
	return &c
}

// leaseLive reports whether someone holds a lease on j at now.
func (j *Job) leaseLive(now time.Time) bool {
	return j.LeaseUntil != nil && now.Before(*j.LeaseUntil)
}

// timePtr returns &t.
func timePtr(t time.Time) *time.Time { return &t }
