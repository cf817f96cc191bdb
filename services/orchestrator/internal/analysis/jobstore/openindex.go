package jobstore

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// openIndex remembers which jobs may be unfinished, so that Unfinished on
// FerretDB reads a few documents by _id instead of scanning the history.
//
// It holds a superset of the unfinished jobs of the collection: seeded by
// one scan when the store opens, an entry is added before every write and
// removed only once the job is known to be finished (a successful write of
// a terminal status, or a read that finds it terminal or gone). That needs
// every writer of the collection to be this store in this process — the
// assumption the document locks make already (see Store).
//
// Each entry also holds the update time of the job as last stored, when
// known, so Unfinished skips without a read the jobs written too recently
// to match.
type openIndex struct {
	mu   sync.Mutex
	seq  uint64               // guarded by mu: stamps entry changes
	jobs map[string]openEntry // guarded by mu: job id → what is known
}

// openEntry is what is known of a possibly unfinished job.
type openEntry struct {
	// updated is the stored update time; zero while unknown (a write in
	// flight or failed), which makes the job a candidate.
	updated time.Time
	// seq identifies this version of the entry: an outcome learned from
	// an older write or read must not overwrite a newer write's entry.
	seq uint64
}

// openCandidate is a job Unfinished has to read.
type openCandidate struct {
	id  string
	seq uint64
}

func newOpenIndex() *openIndex { return &openIndex{jobs: map[string]openEntry{}} }

// seed adds a job found unfinished by the opening scan.
func (o *openIndex) seed(id string, updated time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.jobs[id]; !ok {
		o.seq++
		o.jobs[id] = openEntry{updated: updated, seq: o.seq}
	}
}

// writing records that job id is about to be written and returns the
// function to call with the outcome: j is the state written and ok whether
// the write is known to have succeeded. A nil index (MongoDB) does nothing.
func (o *openIndex) writing(id string) (done func(j *analysis.Job, ok bool)) {
	if o == nil {
		return func(*analysis.Job, bool) {}
	}
	o.mu.Lock()
	o.seq++
	seq := o.seq
	o.jobs[id] = openEntry{seq: seq}
	o.mu.Unlock()
	return func(j *analysis.Job, ok bool) {
		if ok {
			o.settle(openCandidate{id: id, seq: seq}, j)
		}
	}
}

// observed records what a read of candidate c found: j, or nil if the job
// is gone.
func (o *openIndex) observed(c openCandidate, j *analysis.Job) { o.settle(c, j) }

// settle records that job c.id is stored as j (nil: gone), unless the entry
// changed since c was taken.
func (o *openIndex) settle(c openCandidate, j *analysis.Job) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e, ok := o.jobs[c.id]
	if !ok || e.seq != c.seq {
		return
	}
	if j == nil || j.Status.Terminal() {
		delete(o.jobs, c.id)
		return
	}
	e.updated = j.UpdateTime
	o.jobs[c.id] = e
}

// candidates returns, in id order, the jobs with an id after afterID that
// may be unfinished and last written before updatedBefore.
func (o *openIndex) candidates(updatedBefore time.Time, afterID string) []openCandidate {
	o.mu.Lock()
	var out []openCandidate
	for id, e := range o.jobs {
		if id > afterID && (e.updated.IsZero() || e.updated.Before(updatedBefore)) {
			out = append(out, openCandidate{id: id, seq: e.seq})
		}
	}
	o.mu.Unlock()
	slices.SortFunc(out, func(a, b openCandidate) int { return strings.Compare(a.id, b.id) })
	return out
}
