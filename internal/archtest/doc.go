// Package archtest holds repository-wide architecture tests: every package
// has exactly one package doc comment, and imports only flow in the
// directions the design allows (the SDK stays free of the host and its heavy
// dependencies, production code never links the testing package, and so
// on).
//
// The tests inspect the whole module with `go list`, so they live in one
// place instead of being repeated in each package. The package has no API;
// it exists only for its tests.
package archtest
