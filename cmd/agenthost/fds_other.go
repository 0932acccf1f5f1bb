//go:build !linux

package main

// keepInheritedFDsHere is Linux-only; the host runs only there.
func keepInheritedFDsHere() {}
