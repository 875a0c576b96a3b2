package main

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

// holderJSON is a lease's holder as `holder`, `status -o json` and
// `elect --observe -o json` print it. Times are RFC 3339 in UTC, as
// Spanner's commit timestamps record them.
type holderJSON struct {
	Name       string `json:"name"`
	HolderID   string `json:"holder_id"`
	Token      int64  `json:"token"`
	AcquiredAt string `json:"acquired_at"`
	RenewedAt  string `json:"renewed_at"`
	ExpiresAt  string `json:"expires_at"`
	// Value is the value published with the lease (elect --value), when
	// there is one.
	Value string `json:"value,omitempty"`
}

func toJSON(h lease.Holder) holderJSON {
	return holderJSON{
		Name:       h.Name,
		HolderID:   h.HolderID,
		Token:      h.Token,
		AcquiredAt: formatTime(h.AcquiredAt),
		RenewedAt:  formatTime(h.RenewedAt),
		ExpiresAt:  formatTime(h.ExpiresAt),
		Value:      string(h.Payload),
	}
}

func quote(s string) string { return strconv.Quote(s) }

// printable is s for text output: as it is when every character prints, else
// quoted with Go's escapes, so that a name or holder ID cannot move the
// cursor, change colours or forge lines on the reader's terminal.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return s
	}
	return strconv.Quote(s)
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

// shortTime writes an RFC 3339 time of formatTime to the millisecond, for
// tables.
func shortTime(s string) string {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.Format("2006-01-02T15:04:05.000Z07:00")
	}
	return s
}

// writeJSON writes v as one line.
func writeJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}
