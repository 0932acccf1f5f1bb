//go:build race

package codex_test

// raceEnabled: the tests run with the race detector, and so does the
// plugin they build.
const raceEnabled = true
