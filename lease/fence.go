//go:build !spannerlock_plantedbug

package lease

// fenceChecked is false only in builds with the spannerlock_plantedbug tag,
// which the fault suite uses to show that its checker catches a Guard that
// lets stale holders write.
const fenceChecked = true
