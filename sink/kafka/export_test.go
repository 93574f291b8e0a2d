package kafka

// SetTestBeforeOffsetCommit sets the hook that runs in every transaction
// between its records and its offset commit (nil: none).
func SetTestBeforeOffsetCommit(f func()) { testBeforeOffsetCommit = f }
