package analysis

import (
	"strings"

	"github.com/agentmesh/agentmesh/libs/events"
)

// Job events are published on am.evt.<tenant>.job.<root>.<job>.<status>
// (the analysis's own events with <job> = <root>), so one subject filter,
// treeFilter, reads an analysis's whole tree: a watch is served only its
// own tree's events, not every job event of the tenant.
//
// The layout before it was am.evt.<tenant>.job.<job>.<status>
// (events.EventSubject with domain "job"). Events in it stay in the stream
// for events.EventsMaxAge; a watch of an analysis whose events are in that
// layout (see Engine.treeEvents) adds each child's filter in it
// (events.EntityEventsSubject), and cancellations are listened for in both
// (cancelledSubjects).

// JobEventSubject is the subject of job id's event in state status, in the
// tree of analysis rootID.
func JobEventSubject(tenant, rootID, id string, status Status) string {
	return events.EventSubjectPrefix + events.SubjectToken(tenant) + ".job." + events.SubjectToken(rootID) + "." +
		events.SubjectToken(id) + "." + events.SubjectToken(string(status))
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
