package kafka

// SetTestBeforeOffsetCommit sets the hook that runs in every transaction
// between its records and its offset commit (nil: none).
func SetTestBeforeOffsetCommit(f func()) { testBeforeOffsetCommit = f }

// SetTestBeforeEndTxn sets the hook that runs in every transaction
// between its offset commit and its EndTxn (nil: none).
func SetTestBeforeEndTxn(f func()) { testBeforeEndTxn = f }

// HoldCommits keeps s's committers from taking queued calls until
// release is called: the calls queued meanwhile share a transaction.
func HoldCommits(s *Sink) (release func()) {
	h := make(chan struct{})
	s.q.mu.Lock()
	s.q.hold = h
	s.q.mu.Unlock()
	return func() {
		s.q.mu.Lock()
		s.q.hold = nil
		s.q.mu.Unlock()
		close(h)
	}
}

// Queued returns how many calls of s wait for a committer.
func Queued(s *Sink) int {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	return len(s.q.calls)
}
