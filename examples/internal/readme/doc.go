// Package readme has no code. Its tests keep the README and the docs true:
// each Go code block of the README is an example program of this module,
// byte for byte, so that what a reader copies from the README compiles and
// runs (the program's own test runs it); every relative link of README.md,
// CONTRIBUTING.md, docs/*.md and the examples' READMEs leads to a file and
// a heading that exist; and every docs anchor that code names exists.
package readme
