package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// durationValue is a duration flag that takes Go's durations (90s, 1h30m)
// and whole days (1d, 30d, 1d12h), as --cleanup-after does, and says how to
// write a duration when the unit is missing.
type durationValue struct {
	d *time.Duration
	// set records that the flag was given, for flags whose zero means
	// something (--timeout 0 does not wait).
	set *bool
}

func (v durationValue) String() string {
	if v.d == nil {
		return ""
	}
	return formatDuration(*v.d)
}

func (v durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	if v.set != nil {
		*v.set = true
	}
	return nil
}

// durationVar registers a duration flag.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var(durationValue{d: p}, name, usage)
}

// optionalDuration is a duration flag whose absence differs from any value.
type optionalDuration struct {
	d   time.Duration
	set bool
}

func (o *optionalDuration) register(fs *flag.FlagSet, name, usage string) {
	fs.Var(durationValue{d: &o.d, set: &o.set}, name, usage)
}

var daysPrefix = regexp.MustCompile(`^([0-9]+)d`)

// parseDuration reads a duration: Go's syntax, with whole days as "d" in
// front (1d, 30d, 1d12h).
func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	var days time.Duration
	if m := daysPrefix.FindStringSubmatch(s); m != nil {
		n, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil || n > 100*365 {
			return 0, fmt.Errorf("%q: too many days", s)
		}
		days, s = time.Duration(n)*24*time.Hour, s[len(m[0]):]
		if s == "" {
			return days, nil
		}
	}
	d, err := time.ParseDuration(s)
	switch {
	case err == nil:
		return days + d, nil
	case days == 0 && isNumber(s) && s != "0":
		return 0, fmt.Errorf("%s has no unit: write %ss, %sm, %sh or %sd (or ms)", s, s, s, s, s)
	}
	return 0, errors.New("not a duration like 30s, 5m, 1h30m or 1d")
}

func isNumber(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}

// formatDuration writes d as the flags take it: whole days as days.
func formatDuration(d time.Duration) string {
	const day = 24 * time.Hour
	if d >= day && d%day == 0 {
		return strconv.FormatInt(int64(d/day), 10) + "d"
	}
	return d.String()
}
