package chat

import "time"

// SetDeleteSweep sets how often FinishDeletes looks, until the returned
// function puts it back.
func SetDeleteSweep(d time.Duration) (restore func()) {
	old := deleteSweep
	deleteSweep = d
	return func() { deleteSweep = old }
}
