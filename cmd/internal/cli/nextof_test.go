package cli

import "github.com/workrouter/workrouter/sink"

// nextOf is the NextOffset of a Claim's checkpoint, and its error.
func nextOf(cp sink.Checkpoint, err error) (int64, error) { return cp.NextOffset, err }
