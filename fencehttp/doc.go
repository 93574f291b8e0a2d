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
// (epochs.Token.CanClaim's rule), or one a reset's pin keeps out (below),
// with 409 Conflict and a problem body
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
// A store's scope can hold a token a worker will never get past: after
// the consumer group was recreated (or the brokers lost its state), its
// epochs start low again while the store keeps the previous incarnation's
// higher epoch, and every call of the new holder is refused. An operator
// resets the scope through the optional [ScopeResetter] (package admin's
// ResetResource, `workrouter fences reset-resource`): a compare-and-set
// on the [ScopeState] inspected, audited, that stores the new holder and
// a floor, the highest epoch of the previous incarnations. While the
// stored token's epoch is at or below the floor the scope is pinned
// ([ScopeState.Pinned]): only the stored token itself and epochs above
// the floor are admitted ([ScopeState.Admits], the one rule every store
// applies inside its atomic unit), so a member of the previous
// incarnation cannot come back through the reset; the pin lifts by
// itself once a token above the floor is stored. A refusal under the pin
// is a 409 whose body carries the floor ([FencedError.Pinned],
// [FencedError.Floor]).
//
// Every function of the package may be called from any goroutine; a
// [Guard] and a [Transport] serve concurrent requests.
package fencehttp
