// Package logtest routes hclog output into the test log, so that a test's
// log lines appear with its failure (and only with -v otherwise) instead of
// on the process's stderr, interleaved with every other test.
//
// The level is taken from the environment variable AGENTHOST_TEST_LOG_LEVEL
// (trace, debug, info, warn, error or off) and defaults to debug.
package logtest
