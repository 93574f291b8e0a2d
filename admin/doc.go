// Package admin is the operator's side of workrouter, for every front end:
// the `workrouter` CLI is flag parsing, one call into this package and
// rendering, and a team that builds its own tooling (a Kubernetes
// operator, an internal console, a chat bot) calls the same functions.
//
// Diagnose reads each scope's stored fence next to what the brokers say of
// its log and its group, and names what is wrong; Plan is the dry run of a
// reset (what it would change, the expect token, whether it would be
// refused and why), the one place the reset rules live; Reset is the
// audited, guarded admin reset built on Plan (docs/design.md#admin-reset);
// Status describes a group on a topic with its offsets, lag, the state its
// workers report, and the sink's fences. The log and the group are read
// from the brokers the way the consumer reads them (internal/observe:
// the topic ID never from a client's metadata cache, KIP-848 assignments
// matched by topic ID as well as by name).
//
// A reset is itself a write to the fence: it is a compare-and-set on the
// fence the operator inspected, it says what happens to the checkpoint
// (kept, for epochs that went backwards on an intact log; moved, for a new
// log), it is refused when the live group and the log show no reason for
// it unless forced, it is audited in the sink's history, and the next
// claim must come with a proof of membership, so that a member of the
// group's previous incarnation cannot come back through it.
//
// A resource a handler calls (a fencehttp.Guard) keeps a token per scope
// of its own, which a sink's reset does not touch: after a group was
// recreated it may still hold the previous incarnation's higher epoch and
// refuse the new holder, and the worker blocks the partition.
// PlanResources is the dry run of the reset of such a store's scope and
// ResetResource the audited, guarded reset (docs/fenced-resources.md,
// "Resetting a store's scope"): it stores the sink's holder, pinned below
// a floor taken from the store and from the sink's history up to its
// last reset or takeover, so that the previous incarnation's members stay
// refused.
//
// Dead letters (docs/design.md#dead-letters): DeadLetters, DeadLetter and
// DeadLetterAudit read them; Redrive produces an open dead letter's
// command again through a Producer (a *router.Router), with its command ID
// and for the dead letter's group only, and moves it open →
// redriving → redriven, or back to open when producing fails, each move an
// audit row; Drop moves it open → dropped. PlanRedrive and PlanDrop are
// their dry runs. A redrive stopped after producing leaves the dead letter
// redriving, where neither moves it again.
//
// Every function may be called from any goroutine; none starts a goroutine
// that outlives its call.
package admin
