package jobstore

import "time"

// SetBeforeArchiveDelete makes Archive run f, with many writers, between
// its read of the live jobs and its delete of those that move: where
// another replica's write may fall.
func (s *Store) SetBeforeArchiveDelete(f func()) { s.beforeDelete = f }

// SetBeforeInsert makes every command of inserts into the live set run f
// first.
func (s *Store) SetBeforeInsert(f func()) { s.beforeInsert = f }

// Forget makes job id's state unknown to a single writer's mirror, as a
// write whose outcome is unknown does.
func (s *Store) Forget(id string) { s.mirror.forget(id) }

// SetLazyDelay makes UpdateLazily hold writes back for d.
func (s *Store) SetLazyDelay(d time.Duration) { s.lazyDelay = d }

// RelayedRecorded is how many live jobs have entries the relay reported
// stored recorded by a single writer's mirror.
func (s *Store) RelayedRecorded() int {
	s.mirror.mu.Lock()
	defer s.mirror.mu.Unlock()
	return len(s.mirror.relayed)
}
