package router

import "github.com/workrouter/workrouter/envelope"

// Command is [envelope.Command], named here for producers' convenience: a
// program that only sends commands builds them as router.Command values
// and imports router alone. It is the package's only alias of the
// envelope; the command's headers, codec and partitioners are in package
// envelope. Commands are plain values, usable from any goroutine.
type Command = envelope.Command
