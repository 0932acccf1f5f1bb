//go:build race

package claude

// raceEnabled: the tests run under the race detector, so the plugin binary
// is built with it too, and a race in the plugin fails the test that hit it.
const raceEnabled = true
