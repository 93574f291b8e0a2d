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
	// ErrInvalidID means a command's ID (Command.ID, or a record's
	// [IDHeader]) is not 1 to [MaxIDLen] bytes of UTF-8 without control
	// characters. [Decode] wraps it alongside ErrMalformedRecord.
	ErrInvalidID = errors.New("envelope: invalid command ID")
	// ErrRedriveFor means a command to send has Command.RedriveFor set:
	// only a redrive (package router's Router.Redrive) names the group a
	// command is for.
	ErrRedriveFor = errors.New("envelope: RedriveFor is set by a redrive only")
	// ErrInvalidUpstream means a command's Upstream token (or a record's
	// epochs.HeaderKey header) is not a valid token; the error matches
	// epochs.ErrInvalidToken too. [Decode] wraps it alongside
	// ErrMalformedRecord.
	ErrInvalidUpstream = errors.New("envelope: invalid upstream token")
	// ErrEmptyTopic means Encode was given no topic.
	ErrEmptyTopic = errors.New("envelope: empty topic")
	// ErrInvalidPartition means Encode was given a negative partition.
	ErrInvalidPartition = errors.New("envelope: invalid partition")
	// ErrMalformedRecord means Decode was given a record that is not a
	// workrouter command. More specific sentinels (ErrMissingType,
	// ErrEmptyKey, ErrInvalidID) are wrapped alongside it where they apply.
	ErrMalformedRecord = errors.New("envelope: malformed command record")
	// ErrMissingType means a record has no (or an empty) [TypeHeader].
	ErrMissingType = errors.New("envelope: missing command type header")
	// ErrUnknownCompression means [ParseCompression] was given a name it
	// does not know.
	ErrUnknownCompression = errors.New("envelope: unknown compression")
	// ErrUnknownPartitioner means [ParsePartitioner] was given a name it
	// does not know.
	ErrUnknownPartitioner = errors.New("envelope: unknown partitioner")
)
