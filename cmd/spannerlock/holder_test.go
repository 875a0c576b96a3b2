//go:build unix

package main

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spannerlock/terraform-provider-spannerlock/internal/locktable"
	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// holder prints exactly one JSON object on stdout with the six documented
// fields: token a number, times RFC 3339; it exits 3, printing nothing on
// stdout, when nobody holds the name.
func TestHolderJSON(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		held := c.start("--holder-id", "web-1", "--ttl", "30s", "lock", "deploy")
		waitFor(t, "the token", func() bool { return strings.HasSuffix(held.stdout.String(), "\n") })

		r := c.expect(0, "holder", "deploy")
		if strings.Count(r.stdout, "\n") != 1 {
			t.Fatalf("stdout is not one line: %q", r.stdout)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal([]byte(r.stdout), &fields); err != nil {
			t.Fatalf("stdout %q: %v", r.stdout, err)
		}
		if keys := sortedKeys(fields); !slices.Equal(keys, holderFields) {
			t.Fatalf("fields %q, want %q", keys, holderFields)
		}
		var h struct {
			Name       string    `json:"name"`
			HolderID   string    `json:"holder_id"`
			Token      int64     `json:"token"`
			AcquiredAt time.Time `json:"acquired_at"`
			RenewedAt  time.Time `json:"renewed_at"`
			ExpiresAt  time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &h); err != nil {
			t.Fatalf("stdout %q: %v (token must be a number, times RFC 3339)", r.stdout, err)
		}
		if string(fields["token"]) != strings.TrimSpace(held.stdout.String()) {
			t.Errorf("token %s, but the holder printed %q", fields["token"], held.stdout.String())
		}
		if h.Name != "deploy" || h.HolderID != "web-1" || h.ExpiresAt.Sub(h.RenewedAt) != 30*time.Second || h.AcquiredAt.IsZero() {
			t.Errorf("holder %+v: want deploy held by web-1, expiring a TTL after its renewal", h)
		}

		held.signal(syscall.SIGTERM)
		held.expect(0)
		r = c.expect(exitNoHolder, "holder", "deploy")
		if r.stdout != "" || !strings.Contains(r.stderr, "nobody holds") {
			t.Fatalf("free lock: stdout %q, stderr %q", r.stdout, r.stderr)
		}
	})
}

// holderFields are the fields of holder's JSON object, sorted.
var holderFields = []string{"acquired_at", "expires_at", "holder_id", "name", "renewed_at", "token"}

func sortedKeys[V any](m map[string]V) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// statusLease is a lease of status -o json as a test reads it.
type statusLease struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Slot     *int64 `json:"slot"`
	HolderID string `json:"holder_id"`
	Token    int64  `json:"token"`
}

func (l statusLease) String() string {
	s := l.Name + "/" + l.Kind + "/" + l.HolderID
	if l.Slot != nil {
		s += "/" + strconv.FormatInt(*l.Slot, 10)
	}
	return s
}

type statusOutput struct {
	Table      string          `json:"table"`
	Leases     []statusLease   `json:"leases"`
	Semaphores []semaphoreJSON `json:"semaphores"`
}

// leases lists the leases as name/kind/holder[/slot], sorted.
func (st statusOutput) leases() []string {
	var out []string
	for _, l := range st.Leases {
		out = append(out, l.String())
	}
	slices.Sort(out)
	return out
}

func parseStatus(t *testing.T, line string) statusOutput {
	t.Helper()
	var st statusOutput
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	return st
}

// status lists every live lock and permit with its kind, and every declared
// semaphore with its usage, idle ones included, as a table and as JSON;
// each lease in the JSON has holder's fields, its kind and, for a permit,
// its slot.
func TestStatus(t *testing.T) {
	inEachDialect(t, func(t *testing.T, d locktable.Dialect) {
		c := newCLIIn(t, d)
		lc := c.client(lease.WithHolderID("tester"))
		for name, n := range map[string]int64{"migrations": 3, "crawlers": 2} {
			if err := lc.SetPermits(testContext(t), name, n); err != nil {
				t.Fatal(err)
			}
		}
		r := c.expect(0, "status")
		if want := "No live leases in table locks.\n\nSEMAPHORE   IN USE\ncrawlers    0 of 2\nmigrations  0 of 3\n"; r.stdout != want {
			t.Errorf("no live lease:\n%s\nwant:\n%s", r.stdout, want)
		}
		lock := c.start("--holder-id", "web-1", "lock", "deploy")
		waitFor(t, "the lock", func() bool { return strings.HasSuffix(lock.stdout.String(), "\n") })
		for range 2 {
			if _, err := lc.AcquirePermit(testContext(t), "migrations"); err != nil {
				t.Fatal(err)
			}
		}

		r = c.expect(0, "status", "-o", "json")
		st := parseStatus(t, r.stdout)
		if want := []string{"deploy/lock/web-1", "migrations/permit/tester/0", "migrations/permit/tester/1"}; st.Table != "locks" || !slices.Equal(st.leases(), want) {
			t.Errorf("table %q leases %q, want %q", st.Table, st.leases(), want)
		}
		if want := []semaphoreJSON{{Name: "crawlers", Permits: 2, InUse: 0}, {Name: "migrations", Permits: 3, InUse: 2}}; !slices.Equal(st.Semaphores, want) {
			t.Errorf("semaphores %+v, want %+v", st.Semaphores, want)
		}
		var raw struct {
			Leases []map[string]json.RawMessage `json:"leases"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
			t.Fatal(err)
		}
		for _, l := range raw.Leases {
			want := append(slices.Clone(holderFields), "kind")
			if _, ok := l["slot"]; ok {
				want = append(want, "slot")
			}
			slices.Sort(want)
			if keys := sortedKeys(l); !slices.Equal(keys, want) {
				t.Errorf("lease fields %q, want holder's and kind (and slot for a permit)", keys)
			}
		}

		r = c.expect(0, "status")
		for _, want := range []string{"NAME", "KIND", "HOLDER", "TOKEN", "EXPIRES", "deploy", "lock", "web-1", "permit 1", "migrations  2 of 3", "crawlers    0 of 2"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("table lacks %q:\n%s", want, r.stdout)
			}
		}
		lock.signal(syscall.SIGINT)
		lock.expect(0)
	})
}

// holder and status give up after --timeout when Spanner does not answer,
// instead of retrying for minutes.
func TestReadTimeout(t *testing.T) {
	addr := droppingListener(t)
	envv := append(env("projects/p/instances/i/databases/d"), "SPANNER_EMULATOR_HOST="+addr)
	for _, args := range [][]string{{"holder", "--timeout", "1s", "x"}, {"status", "--timeout", "1s"}} {
		r := run(t, t.TempDir(), envv, nil, args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "no answer from Spanner at "+addr+" (SPANNER_EMULATOR_HOST) within --timeout 1s") {
			t.Errorf("%v against an endpoint that never answers: exit %d, stderr:\n%s", args, r.code, r.stderr)
		}
	}
}

// Names and holder IDs with control characters are escaped in text output,
// so that they cannot clear the screen, colour it, or forge lines; JSON
// escapes them already.
func TestControlCharactersEscaped(t *testing.T) {
	c := newCLI(t)
	name, id := "evil\x1b[2J\nname", "web-1\x1b[31m"
	if _, err := c.client(lease.WithHolderID(id)).Acquire(testContext(t), name); err != nil {
		t.Fatal(err)
	}
	r := c.expect(0, "status")
	if strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, `"evil\x1b[2J\nname"`) || !strings.Contains(r.stdout, `"web-1\x1b[31m"`) {
		t.Errorf("status printed control characters raw:\n%q", r.stdout)
	}
	w := c.start("elect", "--observe", name)
	waitFor(t, "the leader line", func() bool { return strings.Contains(w.stdout.String(), "leads") })
	w.signal(syscall.SIGTERM)
	w.expect(0)
	if out := w.stdout.String(); strings.Contains(out, "\x1b") || strings.Count(out, "\n") != 1 {
		t.Errorf("elect --observe printed control characters raw:\n%q", out)
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"deploy": "deploy", "nightly report": "nightly report", "dépôt-東京": "dépôt-東京",
		"a\nb": `"a\nb"`, "\x1b[31m": `"\x1b[31m"`, "bad\xffutf8": `"bad\xffutf8"`, "tab\there": `"tab\there"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}
