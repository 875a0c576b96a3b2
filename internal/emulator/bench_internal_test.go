package emulator

import "testing"

// BenchmarkCreateDatabase lives inside the package to drop each database
// untimed: an instance holds only 100.
func BenchmarkCreateDatabase(b *testing.B) {
	e := Shared(b)
	ctx := Context(b)
	ddl := "CREATE TABLE KV (K STRING(64) NOT NULL, V STRING(MAX)) PRIMARY KEY (K)"
	for b.Loop() {
		db, err := e.CreateDatabase(ctx, ddl)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := e.dropDatabase(ctx, db); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
