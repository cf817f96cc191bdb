package intake

// SetAfterSave makes every ingest of s call f after its first write (the
// document saved, nothing indexed) and end with f's error: as if the
// process were killed there. nil removes it.
func SetAfterSave(s *Service, f func(docID string) error) { s.afterSave = f }

// ClaimKey is the claim key of extraction job id.
func ClaimKey(id string) string { return claimKey(id) }

// SingleWriter reports whether s is its database's only writer.
func (s *Service) SingleWriter() bool { return s.local }
