package consumer

import "time"

// SetCommitPace sets the least time between two commits of the committer
// of a Worker made from c (20 ms by default), so that a test can put the
// committer's next tick out of reach. It exists in this package's tests
// only.
func SetCommitPace[Tx any](c *Config[Tx], d time.Duration) { c.commitPace = d }

// SetTopicCheckInterval sets the least time between two checks of whether
// the topic of a Worker made from c exists (MinTopicCheckInterval by
// default), so that a test of a missing topic need not wait it out. It
// exists in this package's tests only.
func SetTopicCheckInterval[Tx any](c *Config[Tx], d time.Duration) { c.topicCheckEvery = d }

// SetDiagnoseTimeout sets how long a Worker made from c looks at the
// group to tell a fenced claim from a regression of the epochs (5 s by
// default), so that a test whose member cannot reach the coordinator need
// not wait it out. It exists in this package's tests only.
func SetDiagnoseTimeout[Tx any](c *Config[Tx], d time.Duration) { c.diagnoseTimeout = d }
