package jobstore

// SetBeforeArchiveDelete makes Archive run f, with many writers, between
// its read of the live jobs and its delete of those that move: where
// another replica's write may fall.
func (s *Store) SetBeforeArchiveDelete(f func()) { s.beforeDelete = f }

// SetBeforeInsert makes every command of inserts into the live set run f
// first.
func (s *Store) SetBeforeInsert(f func()) { s.beforeInsert = f }
