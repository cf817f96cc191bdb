// Package statemachine holds the rules of a classification run: its
// states, the human commands, the limits, and every transition with the
// events it emits. It does no I/O: the runner performs each state's work
// (a model call, a query, a write of labels), hands the result to a
// transition function here, and checkpoints the returned [Transition]
// (the whole [Run] and its events) in one write.
//
// States and transitions:
//
//	Planning ──plan ok──▶ Fetching ──ids──▶ AwaitingFetchApproval ──ApproveFetch──▶ Classifying
//	   ▲  ▲ query refused     │ empty/failed              │ RejectFetch                  │
//	   │  └───(replanning)────┘                           ▼                              ▼
//	   └──────────────────────────────────────────── Planning ◀──RejectBatch── AwaitingBatchApproval
//	                                                                                    │ ApproveBatch
//	   Summarizing ◀── target reached ── Saving ◀───────────────────────────────────────┘
//	       │                              │ more fetched ──▶ Classifying
//	       ▼                              │ fetched all  ──▶ Fetching (next page of the same plan)
//	   Completed
//
// Stop moves any unfinished state to Stopped; a failure moves to Error and
// the runner then moves Error to Stopped. Exceeding a limit stops the run
// with the reason.
package statemachine

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// State is a state of a run.
type State string

// The states.
const (
	Planning              State = "Planning"
	Fetching              State = "Fetching"
	AwaitingFetchApproval State = "AwaitingFetchApproval"
	Classifying           State = "Classifying"
	AwaitingBatchApproval State = "AwaitingBatchApproval"
	Saving                State = "Saving"
	Summarizing           State = "Summarizing"
	Completed             State = "Completed"
	Stopped               State = "Stopped"
	Error                 State = "Error"
)

// States lists every state.
var States = []State{Planning, Fetching, AwaitingFetchApproval, Classifying, AwaitingBatchApproval, Saving, Summarizing, Completed, Stopped, Error}

// Valid reports whether s is one of States.
func (s State) Valid() bool { return slices.Contains(States, s) }

// Finished reports whether nothing more can happen to a run in s.
func (s State) Finished() bool { return s == Completed || s == Stopped }

// Waiting reports whether a run in s waits for a human command.
func (s State) Waiting() bool { return s == AwaitingFetchApproval || s == AwaitingBatchApproval }

// Command is a human command.
type Command string

// The commands.
const (
	ApproveFetch Command = "ApproveFetch"
	RejectFetch  Command = "RejectFetch"
	ApproveBatch Command = "ApproveBatch"
	RejectBatch  Command = "RejectBatch"
	Stop         Command = "Stop"
)

// Label is a classification outcome.
type Label string

// The labels.
const (
	Resolved   Label = "RESOLVED"
	Unresolved Label = "UNRESOLVED"
)

// Valid reports whether l is RESOLVED or UNRESOLVED.
func (l Label) Valid() bool { return l == Resolved || l == Unresolved }

// Plan is what the planning model proposed.
type Plan struct {
	// TargetSampleSize is how many conversations to classify.
	TargetSampleSize int
	// Strategy is the sampling strategy.
	Strategy string
	// DetailsMarkdown explains the plan.
	DetailsMarkdown string
	// AdditionalInstructions guide classification.
	AdditionalInstructions string
	// QueryJSON is the query as the model wrote it (a JSON object).
	QueryJSON string
	// Refused says why the query was refused; empty for an accepted plan.
	Refused string
}

// Classification is one conversation's label.
type Classification struct {
	// ConversationID is the conversation.
	ConversationID string
	// Label is the outcome.
	Label Label
	// Reason is the model's justification.
	Reason string
}

// Sample describes one fetched conversation for the fetch approval.
type Sample struct {
	// ID is the conversation id.
	ID string
	// MessageCount is its number of messages.
	MessageCount int
	// Summary is a short description (its opening customer message).
	Summary string
}

// Run is the whole context of a run: everything a checkpoint saves and a
// resume needs.
type Run struct {
	// ID identifies the run.
	ID string
	// TenantID and ProjectID scope it.
	TenantID, ProjectID string
	// Instruction is what the user asked for.
	Instruction string
	// State is the current state.
	State State
	// Plans are every plan made, oldest first; the last is current.
	Plans []Plan
	// FetchedIDs are the conversations the current fetch returned.
	FetchedIDs []string
	// FetchSample describes one fetched conversation.
	FetchSample *Sample
	// ContinuationFetch is true while fetching a further page of an
	// accepted plan (after its earlier pages were labelled).
	ContinuationFetch bool
	// BatchIDs is the batch being classified, or waiting for approval.
	BatchIDs []string
	// PendingBatch holds the batch's classifications until approved.
	PendingBatch []Classification
	// LabelledIDs are the conversations labelled so far, in saving order.
	LabelledIDs []string
	// Resolved and Unresolved count the saved labels.
	Resolved, Unresolved int
	// ModelCalls counts model calls made.
	ModelCalls int
	// Feedback is the human feedback of the last rejection.
	Feedback string
	// ReplanReason says why the run went back to Planning on its own.
	ReplanReason string
	// StopReason says why the run stopped.
	StopReason string
	// ErrorMessage describes the failure that led to Error.
	ErrorMessage string
	// Summary is the final summary.
	Summary string
	// CreateTime and UpdateTime are set by the checkpoint store.
	CreateTime, UpdateTime time.Time
}

// CurrentPlan returns the last plan, or nil before the first.
func (r *Run) CurrentPlan() *Plan {
	if len(r.Plans) == 0 {
		return nil
	}
	return &r.Plans[len(r.Plans)-1]
}

// Target is the current plan's target sample size (0 before a plan).
func (r *Run) Target() int {
	if p := r.CurrentPlan(); p != nil && p.Refused == "" {
		return p.TargetSampleSize
	}
	return 0
}

// Progress is the labelled share of the target, in percent, capped at 100.
func (r *Run) Progress() int { return percent(len(r.LabelledIDs), r.Target()) }

func percent(n, of int) int {
	if of <= 0 {
		return 0
	}
	return min(100, n*100/of)
}

// Labelled reports whether conversation id is already labelled.
func (r *Run) Labelled(id string) bool { return slices.Contains(r.LabelledIDs, id) }

// clone returns a deep copy, so transitions never alias their input.
func (r Run) clone() Run {
	r.Plans = slices.Clone(r.Plans)
	r.FetchedIDs = slices.Clone(r.FetchedIDs)
	r.BatchIDs = slices.Clone(r.BatchIDs)
	r.PendingBatch = slices.Clone(r.PendingBatch)
	r.LabelledIDs = slices.Clone(r.LabelledIDs)
	if r.FetchSample != nil {
		s := *r.FetchSample
		r.FetchSample = &s
	}
	return r
}

// Errors of commands and transitions.
var (
	// ErrWrongState means a command or result does not apply to the run's
	// state; the API answers FailedPrecondition.
	ErrWrongState = errors.New("not allowed in the run's current state")
	// ErrFinished means the run is Completed or Stopped.
	ErrFinished = errors.New("run is finished")
	// ErrInvalidResult means a model result does not fit the run (e.g. a
	// classification of a conversation outside the batch).
	ErrInvalidResult = errors.New("invalid result")
)

// StateError is a command or transition refused in the run's state. It
// matches ErrWrongState, or ErrFinished for a finished run, with errors.Is.
type StateError struct {
	// What was attempted, e.g. "ApproveBatch".
	What string
	// State is the run's state.
	State State
}

// Error implements error.
func (e *StateError) Error() string {
	if e.State.Finished() {
		return fmt.Sprintf("%s: run is %s", e.What, e.State)
	}
	return fmt.Sprintf("%s is not allowed in state %s", e.What, e.State)
}

// Is matches ErrWrongState or ErrFinished.
func (e *StateError) Is(target error) bool {
	if e.State.Finished() {
		return target == ErrFinished
	}
	return target == ErrWrongState
}
