package sqlite

// SetAfterApplyCommit makes f run after every Apply's COMMIT that
// succeeded; an error of f is returned as the commit's (the in-process
// analogue of a commit whose reply was lost).
func SetAfterApplyCommit(s *Sink, f func() error) { s.afterApplyCommit = f }
