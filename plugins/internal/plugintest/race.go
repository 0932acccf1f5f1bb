//go:build race

package plugintest

// raceEnabled: the tests run under the race detector, so BuildPlugin builds
// the plugin with it too.
const raceEnabled = true
