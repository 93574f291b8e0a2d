// Package surface holds the checks of the library's public surface (the
// root module's packages outside internal/).
//
// TestSurface: no exported top-level name of a library package is exported
// only for another package of this repository. It type-checks every
// package of the six modules, with their tests, and finds where each
// exported name is used. A user sees a name when an Example function uses
// it, when the external tests of its package use it, when README.md or a
// user's doc (docs/*.md but design.md and releasing.md, which are for
// contributors) names it as pkg.Name, when go doc of its package names it
// (the package doc, or the doc comment of another exported declaration),
// when a library doc comment names it as pkg.Name, when another exported
// name's signature, field or variable has its type, or when it is a value
// of a type users see. A name that another package of the repository uses
// and no user sees is reported: move it under internal/, unexport it, show
// it to users (an Example, the docs), or, failing all, add it to the
// allowlist in surface_test.go with the reason.
//
//	go test ./cmd/internal/surface -run TestSurface -v -args -list   # every name and where it is used
//
// TestSentinelsPrefixed: every error sentinel of the root module starts
// with its package's name and a colon, and an invalid configuration's is
// ErrConfig.
package surface
