//go:build spannerlock_plantedbug

package main

// build names the lease package this worker was built with: here one whose
// Guard accepts every write (lease/fence_bug.go).
const build = "spannerlock_plantedbug"
