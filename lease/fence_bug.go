//go:build spannerlock_plantedbug

package lease

// fenceChecked = false makes Guard accept every write, as a broken fencing
// check would. Only the fault suite builds this, to prove it fails then.
const fenceChecked = false
