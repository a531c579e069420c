package ledger

// SetCaptureInSteps makes CaptureEscrow post a user payer's capture in
// three statements, as it posts a platform payer's, until the returned
// function restores it (BenchmarkInsideCapture compares the two ways).
func SetCaptureInSteps(v bool) (restore func()) {
	old := captureInSteps
	captureInSteps = v
	return func() { captureInSteps = old }
}
