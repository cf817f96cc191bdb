package intake

// SetAfterSave makes every ingest of s call f after its first write (the
// document saved, nothing indexed) and end with f's error: as if the
// process were killed there. nil removes it.
func SetAfterSave(s *Service, f func(docID string) error) { s.afterSave = f }
