package testkit

import (
	"fmt"
	"testing"
	"time"
)

// pollInterval is how often Eventually re-checks its condition.
const pollInterval = 10 * time.Millisecond

// Eventually calls cond at once and then every 10ms until it returns true,
// and fails the test with t.Fatalf if that has not happened within timeout.
// msgAndArgs, if given, describe what was awaited: a string, or a format
// string followed by its arguments. Like t.Fatalf, it must be called from
// the test's goroutine. Tests wait with it instead of time.Sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v%s", timeout, describe(msgAndArgs))
		}
		<-tick.C
	}
}

// describe formats Eventually's msgAndArgs as ": message", or "" if none.
func describe(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return ": " + fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return ": " + fmt.Sprint(msgAndArgs...)
}
