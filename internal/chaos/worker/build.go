//go:build !spannerlock_plantedbug

package main

// build names the lease package this worker was built with, for the log.
const build = "normal"
