// Package surface holds the checks of the library's public surface: its
// error sentinels say which package they come from.
package surface
