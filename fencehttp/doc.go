// Package fencehttp carries workrouter's fencing token over HTTP, to a
// resource that checks it itself: a call a handler makes to another
// service, which no sink transaction can fence
// (docs/fenced-resources.md).
//
// The client half: a handler puts its tenure's [Fence] (the token and an
// idempotency key derived from the command, [CommandFence]) on the
// context of its request with [WithFence]; [Transport], an
// http.RoundTripper, sends it in the [TokenHeader] and [KeyHeader]
// headers; [CheckResponse] turns the server's refusal into a
// [*FencedError], which matches [ErrFenced] and
// [github.com/workrouter/workrouter/sink.ErrFenced], so that a worker
// whose handler returns it stops the partition as it does when its own
// sink fences it. The key is a function of the command alone, so every
// retry of the same record, by the same tenure or the next one, sends the
// same key.
//
// The server half: [Guard] is net/http middleware over a [Store]. For
// each request it opens a unit of the store in which the store keeps, per
// scope (group, topic, partition), the highest token it has seen and
// refuses an older one, or one of the same epoch from another member
// (epochs.Token.CanClaim's rule), with 409 Conflict and a problem body
// ([ProblemFenced]) naming the stored and the presented token; it answers
// a request whose key it has already recorded with the first result,
// without running the handler; and it runs the handler inside the unit
// otherwise, recording its result under the key in the same unit. When
// the store is the resource's own database (package
// fencehttp/sqlstore), the handler's writes go through the same
// transaction, so the check, the write and the key commit or fail
// together; with fencehttp/redisstore, on a Redis server, the handler's
// writes are buffered and run by the commit's Lua script, which checks
// the token again (a unit whose lease expired under a newer token is
// refused at commit, and the Guard answers 409). Package
// fencehttp/memstore is a store for tests, and fencehttp/storetest the
// conformance suite every store passes.
//
// Every function of the package may be called from any goroutine; a
// [Guard] and a [Transport] serve concurrent requests.
package fencehttp
