package chaos

import (
	"testing"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/emulator"
)

func TestMain(m *testing.M) { emulator.Main(m) }
