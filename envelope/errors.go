package envelope

import "errors"

// Sentinel errors. Errors returned by this package wrap one (or more) of
// these with details; match them with errors.Is. Package router returns
// them too, from its sends, for a command that [Command.Validate] refuses.
var (
	// ErrEmptyKey means a command has no key. Every command needs a key:
	// the key selects the partition and so the worker that applies it.
	ErrEmptyKey = errors.New("envelope: empty command key")
	// ErrEmptyType means a command has no type.
	ErrEmptyType = errors.New("envelope: empty command type")
	// ErrReservedHeader means a user header key starts with
	// [ReservedHeaderPrefix], which workrouter keeps for itself.
	ErrReservedHeader = errors.New("envelope: reserved header key")
	// ErrEmptyTopic means Encode was given no topic.
	ErrEmptyTopic = errors.New("envelope: empty topic")
	// ErrInvalidPartition means Encode was given a negative partition.
	ErrInvalidPartition = errors.New("envelope: invalid partition")
	// ErrMalformedRecord means Decode was given a record that is not a
	// workrouter command. More specific sentinels (ErrMissingType,
	// ErrEmptyKey) are wrapped alongside it where they apply.
	ErrMalformedRecord = errors.New("envelope: malformed command record")
	// ErrMissingType means a record has no (or an empty) [TypeHeader].
	ErrMissingType = errors.New("envelope: missing command type header")
	// ErrUnknownPartitioner means [ParsePartitioner] was given a name it
	// does not know.
	ErrUnknownPartitioner = errors.New("envelope: unknown partitioner")
)
