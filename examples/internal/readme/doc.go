// Package readme has no code. Its test keeps the README's Go code blocks
// true: each one is an example program of this module, byte for byte, so
// that what a reader copies from the README compiles and runs (the
// program's own test runs it).
package readme
