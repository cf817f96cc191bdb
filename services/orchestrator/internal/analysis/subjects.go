package analysis

import (
	"strings"

	"github.com/agentmesh/agentmesh/libs/events"
)

// Job events are published on am.evt.<tenant>.job.<root>.<job>.<state>
// (the analysis's own events with <job> = <root>), so one subject filter,
// treeFilter, reads an analysis's whole tree: a watch is served only its
// own tree's events, not every job event of the tenant. <state> is the
// terminal status of a job's final event (complete, failed, cancelled) and
// "active" for every state before it (pending, running, waiting for its
// children); the status itself is in the event. The stream keeps state for
// each subject it holds, for events.EventsMaxAge: with a subject per status,
// an analysis of two tools had 15 subjects, now 10. The terminal subjects let a listener pick
// the jobs that ended one way (cancelledSubjects), and the archive check
// that a job's final event is in the stream by its subject alone
// (Engine.relayed).
//
// Two layouts came before it, and their events stay in the stream for
// events.EventsMaxAge. The one just before had a subject per status for
// every state (…<job>.pending, .running, .waiting_for_children): events in
// it are read by the same treeFilter, and its terminal subjects are
// today's. The one before that was am.evt.<tenant>.job.<job>.<status>
// (events.EventSubject with domain "job"): a watch of an analysis whose
// events are in that layout (see Engine.treeEvents) adds each child's
// filter in it (events.EntityEventsSubject), and cancellations are listened
// for in it too (cancelledSubjects).

// JobEventSubject is the subject of job id's event in state status, in the
// tree of analysis rootID.
func JobEventSubject(tenant, rootID, id string, status Status) string {
	return events.EventSubjectPrefix + events.SubjectToken(tenant) + ".job." + events.SubjectToken(rootID) + "." +
		events.SubjectToken(id) + "." + subjectState(status)
}

// subjectActive is the last token of the subject of a job's events before
// its final one.
const subjectActive = "active"

// subjectState is the last token of the subject of an event of a job in
// state status.
func subjectState(status Status) string {
	if status.Terminal() {
		return events.SubjectToken(string(status))
	}
	return subjectActive
}

// treeFilter matches every event of analysis rootID's tree, in both
// layouts' subjects of the analysis itself.
func treeFilter(tenant, rootID string) string {
	return events.EventSubjectPrefix + events.SubjectToken(tenant) + ".job." + events.SubjectToken(rootID) + ".>"
}

// cancelledSubjects match every job's cancellation, in this layout and in
// the previous one (a replica of the previous version during a rolling
// upgrade).
var cancelledSubjects = []string{
	events.EventSubjectPrefix + "*.job.*.*." + string(StatusCancelled),
	events.EventSubjectPrefix + "*.job.*." + string(StatusCancelled),
}

// isLegacySubject reports whether subject is a job event subject in the
// previous layout (one token fewer).
func isLegacySubject(subject string) bool {
	return strings.Count(subject, ".") == 5
}
