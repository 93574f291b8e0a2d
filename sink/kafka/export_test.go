package kafka

// SetTestBeforeOffsetCommit sets the hook that runs in every transaction
// between its records and its offset commit (nil: none).
func SetTestBeforeOffsetCommit(f func()) { testBeforeOffsetCommit = f }

// SetTestBeforeEndTxn sets the hook that runs in every transaction
// between its offset commit and its EndTxn (nil: none).
func SetTestBeforeEndTxn(f func()) { testBeforeEndTxn = f }
