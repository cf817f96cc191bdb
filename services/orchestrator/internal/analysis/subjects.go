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
// The layout before it was am.evt.<tenant>.job.<job>.<status>. Events in
// it stay in the stream for events.EventsMaxAge; a watch of an analysis
// whose events are in that layout (see Engine.firstSequence) adds each job's
// legacy filter, and cancellations are listened for in both.

// JobEventSubject is the subject of job id's event in state status, in the tree
// of analysis rootID. A "*" token stays a wildcard (for subscriptions).
func JobEventSubject(tenant, rootID, id string, status Status) string {
	return events.EventSubjectPrefix + token(tenant) + ".job." + token(rootID) + "." + token(id) + "." + token(string(status))
}

// treeFilter matches every event of analysis rootID's tree, in both
// layouts' subjects of the analysis itself.
func treeFilter(tenant, rootID string) string {
	return events.EventSubjectPrefix + token(tenant) + ".job." + token(rootID) + ".>"
}

// legacyJobSubject is job id's event subject in the previous layout.
func legacyJobSubject(tenant, id string, status Status) string {
	return events.EventSubjectPrefix + token(tenant) + ".job." + token(id) + "." + token(string(status))
}

// legacyJobFilter matches job id's events in the previous layout.
func legacyJobFilter(tenant, id string) string {
	return events.EventSubjectPrefix + token(tenant) + ".job." + token(id) + ".*"
}

// isLegacySubject reports whether subject is a job event subject in the
// previous layout (one token fewer).
func isLegacySubject(subject string) bool {
	return strings.Count(subject, ".") == 5
}

// token is s as a subject token; "*" stays the wildcard.
func token(s string) string {
	if s == "*" {
		return s
	}
	return events.SubjectToken(s)
}
