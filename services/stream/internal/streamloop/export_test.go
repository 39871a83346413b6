package streamloop

// SetMaxComparedKnown sets the bound on known-message maps compared entry
// by entry until the returned restore runs. Not for parallel tests.
func SetMaxComparedKnown(n int) (restore func()) {
	old := maxComparedKnown
	maxComparedKnown = n
	return func() { maxComparedKnown = old }
}
