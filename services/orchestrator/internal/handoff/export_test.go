package handoff

// SetTestHook sets testHook for the child process of
// TestKilledOrchestratorStartsOneAnalysis, before the orchestrator starts.
func SetTestHook(f func(point, documentID, jobID string)) { testHook = f }
