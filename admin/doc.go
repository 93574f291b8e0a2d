// Package admin is the operator's side of workrouter, for every front end:
// the `workrouter` CLI is flag parsing, one call into this package and
// rendering, and a team that builds its own tooling (a Kubernetes
// operator, an internal console, a chat bot) calls the same functions.
//
// Diagnose reads each scope's stored fence next to what the brokers say of
// its log and its group, and names what is wrong; Reset is the audited,
// guarded admin reset (docs/design.md#admin-reset).
//
// A reset is itself a write to the fence: it is a compare-and-set on the
// fence the operator inspected, it says what happens to the checkpoint
// (kept, for epochs that went backwards on an intact log; moved, for a new
// log), it is refused when the live group and the log show no reason for
// it unless forced, it is audited in the sink's history, and the next
// claim must come with a proof of membership, so that a member of the
// group's previous incarnation cannot come back through it.
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
