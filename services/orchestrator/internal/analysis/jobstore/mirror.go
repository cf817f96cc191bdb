package jobstore

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentmesh/agentmesh/libs/events"
	"github.com/agentmesh/agentmesh/libs/lru"
	"github.com/agentmesh/agentmesh/services/orchestrator/internal/analysis"
)

// archivedCacheSize bounds the cache of archived jobs kept on FerretDB, so
// that watchers and pollers of analyses that just finished read memory,
// not the (ever growing) archive.
const archivedCacheSize = 4096

// mirror is what the store keeps in memory on FerretDB: a copy of the live
// set, the set of archived job ids and a cache of recently archived jobs.
// With this process the only writer (see the package comment), the store
// updates it with every write it makes, so it is exact: a job is live if
// and only if the mirror says so, and archived only if its id is in the
// set. A job whose write had an unknown outcome becomes "unknown" and is
// read again.
type mirror struct {
	mu   sync.Mutex
	jobs map[string]*analysis.Job // guarded by mu: live job id → copy; nil: live or not, unknown
	// docs holds, for live jobs whose document the store knows exactly
	// (it inserted, loaded or read it, and wrote every change since, the
	// relay's removals included: Store.RemoveRelayed), the document as
	// stored: a write held back (UpdateLazily) is in jobs, not here.
	docs map[string]storedDoc // guarded by mu
	// archived holds the ids of archived jobs (and of some that failed to
	// be): looking up a job in neither collection — a child not created
	// yet — reads nothing. Ids are UUIDs, kept in 16 bytes.
	archived      map[uuid.UUID]struct{}    // guarded by mu
	archivedOther map[string]struct{}       // guarded by mu: ids that are not UUIDs
	cache         *lru.Cache[*analysis.Job] // guarded by mu: archived job id → copy
	// relayed holds, for live jobs, the ids of their outbox entries the
	// relay reported stored in JetStream (Store.Published): the archiver
	// need not ask JetStream about those.
	relayed map[string]map[string]struct{} // guarded by mu: live job id → entry ids
}

// storedDoc is a live job's document as stored: the job and its outbox.
type storedDoc struct {
	job    *analysis.Job
	outbox []events.OutboxEntry
}

// newMirror returns a mirror of a live set holding jobs, whose documents
// docs are known (a job's may not be), and of an archive holding the jobs
// with ids archived.
func newMirror(jobs []*analysis.Job, docs []storedDoc, archived []string) *mirror {
	m := &mirror{
		jobs: make(map[string]*analysis.Job, len(jobs)), docs: make(map[string]storedDoc, len(docs)),
		archived: make(map[uuid.UUID]struct{}, len(archived)), archivedOther: map[string]struct{}{},
		cache: lru.New[*analysis.Job](archivedCacheSize), relayed: map[string]map[string]struct{}{},
	}
	for _, j := range jobs {
		m.jobs[j.ID] = copyJob(j)
	}
	for _, d := range docs {
		m.docs[d.job.ID] = d
	}
	for _, id := range archived {
		m.addArchived(id)
	}
	return m
}

func (m *mirror) addArchived(id string) {
	if u, err := uuid.Parse(id); err == nil && u.String() == id {
		m.archived[u] = struct{}{}
		return
	}
	m.archivedOther[id] = struct{}{}
}

func (m *mirror) isArchived(id string) bool {
	if u, err := uuid.Parse(id); err == nil && u.String() == id {
		_, ok := m.archived[u]
		return ok
	}
	_, ok := m.archivedOther[id]
	return ok
}

// live returns a copy of the live job id (nil if it is not live) and
// whether the mirror knows.
func (m *mirror) live(id string) (*analysis.Job, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	switch {
	case ok && j != nil:
		return copyJob(j), true
	case ok:
		return nil, false
	default:
		return nil, true
	}
}

// put records j as the live job's state ahead of its write (a held write,
// see UpdateLazily): the document is recorded when it is written.
func (m *mirror) put(j *analysis.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[j.ID] = copyJob(j)
}

// gone reports whether job id is known not to be live.
func (m *mirror) gone(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.jobs[id] // present with nil: unknown
	return !ok
}

// stored records that j is now stored in the live set, with outbox pushed
// to its document; inserted says the write created the document.
func (m *mirror) stored(j *analysis.Job, outbox []events.OutboxEntry, inserted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[j.ID] = copyJob(j)
	d, known := m.docs[j.ID]
	switch {
	case inserted:
		m.docs[j.ID] = storedDoc{copyJob(j), slices.Clone(outbox)}
	case known:
		m.docs[j.ID] = storedDoc{copyJob(j), append(slices.Clip(d.outbox), outbox...)}
	}
}

// doc returns a copy of live job id's document as stored, if the mirror
// knows it.
func (m *mirror) doc(id string) (storedDoc, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.docs[id]
	if !ok {
		return storedDoc{}, false
	}
	return storedDoc{copyJob(d.job), slices.Clone(d.outbox)}, true
}

// knowsDoc reports whether the mirror knows live job id's document.
func (m *mirror) knowsDoc(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.docs[id]
	return ok
}

// forgetDoc makes live job id's document unknown, its state still known:
// after a write of the document as stored (a removal of relayed entries)
// whose outcome is unknown.
func (m *mirror) forgetDoc(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.docs, id)
}

// outboxKept records that the outbox of live job id's document now holds
// keep, after a removal of relayed entries.
func (m *mirror) outboxKept(id string, keep []events.OutboxEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.docs[id]; ok {
		d.outbox = keep
		m.docs[id] = d
	}
	// The removed entries are no longer the archiver's question.
	if set := m.relayed[id]; set != nil {
		for e := range set {
			if !slices.ContainsFunc(keep, func(k events.OutboxEntry) bool { return k.ID == e }) {
				delete(set, e)
			}
		}
	}
}

// outbox returns a copy of live job id (nil if not live) and the entries
// its outbox holds, if the mirror knows them.
func (m *mirror) outbox(id string) (*analysis.Job, []events.OutboxEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[id]
	switch {
	case !ok:
		return nil, nil, true
	case j == nil:
		return nil, nil, false
	}
	d, known := m.docs[id]
	if !known {
		return nil, nil, false
	}
	return copyJob(j), slices.Clone(d.outbox), true
}

// forget makes the state of job id unknown, after a write whose outcome is
// unknown.
func (m *mirror) forget(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.jobs[id] = nil
	delete(m.docs, id)
}

// learned records what a read of the live set found for job id: its
// document d, or d.job nil if it is not live; whole says d is the whole
// document, read under the job's lock (then it is the document as stored,
// even with a write held back). A job the mirror knows is not live stays
// so (a read that began before the job was archived must not bring it
// back), and newer knowledge of a job's state is never overwritten.
func (m *mirror) learned(id string, d storedDoc, whole bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.jobs[id]
	switch {
	case !ok:
		return
	case d.job == nil:
		if cur == nil || whole {
			delete(m.jobs, id) // not live after all
			delete(m.docs, id)
			delete(m.relayed, id)
		}
		return
	}
	if cur == nil || d.job.Version > cur.Version {
		m.jobs[id] = copyJob(d.job)
		delete(m.docs, id)
	}
	if whole {
		m.docs[id] = d
	}
}

// mayBeArchived records that jobs may have been written to the archive.
func (m *mirror) mayBeArchived(jobs []*analysis.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, j := range jobs {
		m.addArchived(j.ID)
	}
}

// archivedNow records that j moved from the live set to the archive.
func (m *mirror) archivedNow(j *analysis.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.jobs, j.ID)
	delete(m.docs, j.ID)
	delete(m.relayed, j.ID)
	m.cacheArchived(j)
}

// published records that the entries entryIDs of live job id's outbox are
// stored in JetStream. A job not live (archived meanwhile) is left alone:
// nothing would drop what is recorded.
func (m *mirror) published(id string, entryIDs []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, live := m.jobs[id]; !live {
		return
	}
	set := m.relayed[id]
	if set == nil {
		set = make(map[string]struct{}, len(entryIDs))
		m.relayed[id] = set
	}
	for _, e := range entryIDs {
		set[e] = struct{}{}
	}
}

// unrelayed returns the entries of outbox, an outbox of live job id, that
// the relay has not reported stored in JetStream.
func (m *mirror) unrelayed(id string, outbox []events.OutboxEntry) []events.OutboxEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.relayed[id]
	if len(set) == 0 {
		return outbox
	}
	var left []events.OutboxEntry
	for _, e := range outbox {
		if _, ok := set[e.ID]; !ok {
			left = append(left, e)
		}
	}
	return left
}

// archivedRead caches an archived job that was read.
func (m *mirror) archivedRead(j *analysis.Job) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cacheArchived(j)
}

func (m *mirror) cacheArchived(j *analysis.Job) {
	m.addArchived(j.ID)
	m.cache.Put(j.ID, copyJob(j), 1)
}

// archivedJob returns a copy of the cached archived job id, or nil and
// whether the archive may hold it.
func (m *mirror) archivedJob(id string) (j *analysis.Job, maybe bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if j, ok := m.cache.Get(id); ok {
		return copyJob(j), true
	}
	return nil, m.isArchived(id)
}

// liveBefore returns, in id order, up to limit live jobs with an id after
// afterID that were last written before updatedBefore, and the ids of jobs
// in an unknown state, which the caller must read.
func (m *mirror) liveBefore(updatedBefore time.Time, afterID string, limit int) (jobs []*analysis.Job, unknown []string) {
	m.mu.Lock()
	for id, j := range m.jobs {
		switch {
		case id <= afterID:
		case j == nil:
			unknown = append(unknown, id)
		case j.UpdateTime.Before(updatedBefore):
			jobs = append(jobs, copyJob(j))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(jobs, func(a, b *analysis.Job) int { return strings.Compare(a.ID, b.ID) })
	if len(jobs) > limit {
		jobs = jobs[:limit]
	}
	return jobs, unknown
}

// lapsed returns the live jobs running under a claim that ended before
// now, and the ids of jobs in an unknown state, which the caller must read.
func (m *mirror) lapsed(now time.Time) (jobs []*analysis.Job, unknown []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, j := range m.jobs {
		switch {
		case j == nil:
			unknown = append(unknown, id)
		case lapsed(j, now):
			jobs = append(jobs, copyJob(j))
		}
	}
	return jobs, unknown
}

// copyJob returns a copy of j that shares nothing mutable with it.
func copyJob(j *analysis.Job) *analysis.Job {
	c := *j
	c.AllowedTools = slices.Clone(j.AllowedTools)
	c.Plan = slices.Clone(j.Plan)
	c.StartTime = clonePtr(j.StartTime)
	c.EndTime = clonePtr(j.EndTime)
	c.LeaseUntil = clonePtr(j.LeaseUntil)
	return &c
}

func clonePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}
