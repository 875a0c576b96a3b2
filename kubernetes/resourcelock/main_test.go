package resourcelock_test

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv(electorEnv) != "" {
		os.Exit(runElector())
	}
	os.Exit(m.Run())
}
