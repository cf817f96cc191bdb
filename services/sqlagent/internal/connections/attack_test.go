package connections_test

import (
	"errors"
	"testing"

	"github.com/agentmesh/agentmesh/services/sqlagent/internal/connections"
	"github.com/agentmesh/agentmesh/services/sqlagent/internal/safety"
)

// attack is a named SQL text; {placeholders} are filled by the suite.
type attack struct{ name, sql string }

// outcome classifies how an attack ended.
type outcome string

const (
	byLock1  outcome = "token check"
	byLock2  outcome = "server-side check"
	byServer outcome = "server rejected it"
	ran      outcome = "ran"
)

// The two ways each attack runs: the whole chain a user's SQL takes, and
// straight into the registry, to show its locks hold without the first.
const (
	passChain    = "chain"
	passRegistry = "registry locks alone"
)

// attackSuite runs attacks and legitimate queries against one database.
type attackSuite struct {
	dialect safety.Dialect
	// expand fills an attack's placeholders.
	expand func(string) string
	// query runs checked SQL as a read job does (the registry's Query).
	query func(string) (*connections.Result, error)
	// state reads everything the attacks could change.
	state func() serverState
	// harmless names the attacks whose text does nothing dangerous once
	// read the way the engine reads it (a comment hides the "attack", the
	// row limit ends it): they may run. Any other attack that runs fails
	// the suite even when the state check sees no change, since a later
	// lock (the session reset) may only have undone it.
	harmless map[string]bool
}

// attackReport counts what the attacks did.
type attackReport struct {
	runs, changed int
	counts        map[string]map[outcome]int
	// last is the state after the last run, for what follows.
	last serverState
}

// run runs every attack in both passes, comparing the state before and
// after each run; a change fails the test.
func (s attackSuite) run(t *testing.T, attacks []attack) attackReport {
	t.Helper()
	rep := attackReport{counts: map[string]map[outcome]int{passChain: {}, passRegistry: {}}, last: s.state()}
	for _, a := range attacks {
		query := s.expand(a.sql)
		for _, pass := range []string{passChain, passRegistry} {
			how, detail := s.attempt(query, pass == passChain)
			rep.runs++
			rep.counts[pass][how]++
			if how == ran && !s.harmless[a.name] {
				t.Errorf("%s (%s): %q ran; only attacks marked harmless may", a.name, pass, query)
			}
			after := s.state()
			if d := rep.last.diff(after); len(d) > 0 {
				rep.changed++
				t.Errorf("%s (%s): %q ended %q (%s) and changed the database:\n  %v", a.name, pass, query, how, detail, d)
				rep.last = after
			}
		}
	}
	return rep
}

// attempt runs one attack, through the token checker first when chain is
// set, and says how it ended.
func (s attackSuite) attempt(query string, chain bool) (outcome, string) {
	if chain {
		checked, err := safety.Check(query, s.dialect)
		if err != nil {
			return byLock1, err.Error()
		}
		query = checked
	}
	_, err := s.query(query)
	switch {
	case errors.Is(err, connections.ErrRefused):
		return byLock2, err.Error()
	case err != nil:
		return byServer, err.Error()
	}
	return ran, ""
}

// legitimate runs each analyst query through the whole chain; each must
// return rows. It returns how many did not.
func (s attackSuite) legitimate(t *testing.T, queries []attack) int {
	t.Helper()
	failed := 0
	for _, q := range queries {
		checked, err := safety.Check(q.sql, s.dialect)
		if err == nil {
			var res *connections.Result
			res, err = s.query(checked)
			if err == nil && len(res.Rows) == 0 {
				err = errors.New("no rows")
			}
		}
		if err != nil {
			failed++
			t.Errorf("legitimate query %s refused or failed: %v\n  %s", q.name, err, q.sql)
		}
	}
	return failed
}

// calibrate runs attacks with no guard at all (exec) and fails for each
// whose effect the state check does not see: it is what keeps the suite
// from passing because it looks at nothing. Each leaves its effect in
// place, so calibration runs last.
func (s attackSuite) calibrate(t *testing.T, before serverState, exec func(string) error, attacks []string) {
	t.Helper()
	for _, a := range attacks {
		q := s.expand(a)
		if err := exec(q); err != nil {
			t.Errorf("calibration %q: %v", q, err)
			continue
		}
		after := s.state()
		if len(before.diff(after)) == 0 {
			t.Errorf("calibration %q ran unguarded, but the state check saw no change", q)
		}
		before = after
	}
}

// runAll is the whole suite against one engine: every attack in both
// passes, then the legitimate queries (which must change nothing), the
// promised sizes (at least 100 attacks and 50 legitimate queries), and
// last the calibration through exec (an unguarded session). It logs the
// figures, prefixed with engine.
func (s attackSuite) runAll(t *testing.T, engine string, attacks, legit []attack, calibration []string, exec func(string) error) {
	t.Helper()
	rep := s.run(t, attacks)
	refusedLegit := s.legitimate(t, legit)
	if d := rep.last.diff(s.state()); len(d) > 0 {
		t.Errorf("the legitimate queries changed the database: %v", d)
	}
	if len(attacks) < 100 || len(legit) < 50 {
		t.Errorf("%d attacks and %d legitimate queries; the suite promises at least 100 and 50", len(attacks), len(legit))
	}
	s.calibrate(t, s.state(), exec, calibration)
	t.Logf("%s: %d attacks, %d runs (%s, %s), %d changed the database; %s: %v; %s: %v",
		engine, len(attacks), rep.runs, passChain, passRegistry, rep.changed, passChain, rep.counts[passChain], passRegistry, rep.counts[passRegistry])
	t.Logf("%s: %d legitimate analyst queries, %d refused or failed", engine, len(legit), refusedLegit)
}
