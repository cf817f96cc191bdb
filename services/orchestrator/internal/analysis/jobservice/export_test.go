package jobservice

// RelayRemovalDelay is how long the relay waits before removing published
// entries, for tests that count what it writes.
const RelayRemovalDelay = relayRemovalDelay
