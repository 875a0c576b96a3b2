package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spannerlock/terraform-provider-spannerlock/lease"
)

func semaphoreCommand() *command {
	return &command{
		name:    "semaphore",
		summary: "declare a semaphore's number of permits, or show it and the permits in use",
		synopsis: `spannerlock semaphore set [flags] NAME N
spannerlock semaphore get [-o text|json] [flags] NAME`,
		help: `
set declares the semaphore NAME with N permits (N >= 1), or changes its
number, as consul lock -n does for a shell; permit then runs at most N
commands at once under it. Lowering N takes no permit away: holders above
the new number keep theirs until they release, and no permit is granted
until fewer than N are held. It writes what the spannerlock_semaphore
Terraform resource and lease.Client.SetPermits write; declare a semaphore
with one of them, not several.

get prints the semaphore's number of permits and how many are in use, then
each permit in use with its slot, holder, fencing token and expiry. With
-o json it prints one object:

  {"name":"migrations","permits":3,"in_use":2,
   "holders":[{"name":"migrations","holder_id":...,"token":...,"acquired_at":...,
               "renewed_at":...,"expires_at":...,"slot":0}, ...]}

A semaphore that is not declared is an error (exit status 1).

Examples:
  spannerlock semaphore set migrations 3
  spannerlock permit migrations -- ./migrate.sh
  spannerlock semaphore get migrations
  spannerlock semaphore get -o json migrations | jq .in_use`,
		run: runSemaphore,
	}
}

// semaphoreDetailJSON is a semaphore as semaphore get -o json prints it.
type semaphoreDetailJSON struct {
	Name    string       `json:"name"`
	Permits int64        `json:"permits"`
	InUse   int          `json:"in_use"`
	Holders []permitJSON `json:"holders"`
}

// permitJSON is a permit in use: the fields of holder, and its slot.
type permitJSON struct {
	holderJSON
	Slot int64 `json:"slot"`
}

func runSemaphore(a *app, args []string) error {
	if len(args) == 0 {
		return usageError("semaphore needs set or get: spannerlock semaphore set NAME N, or spannerlock semaphore get NAME")
	}
	switch sub, args := args[0], args[1:]; sub {
	case "set":
		return a.setPermits(args)
	case "get":
		return a.getSemaphore(args)
	case "-h", "--help", "help":
		a.printHelp(a.stdout, a.newFlagSet("semaphore"))
		return errHelp
	default:
		return usageError("semaphore %q: the subcommands are set and get", sub)
	}
}

func (a *app) setPermits(args []string) error {
	fs := a.newFlagSet("semaphore")
	timeout := readTimeoutFlag(fs)
	pos, argv, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if err := noCommand(fs, argv); err != nil {
		return err
	}
	if len(pos) != 2 {
		return usageError("semaphore set takes NAME and N, the number of permits: spannerlock semaphore set migrations 3")
	}
	name := pos[0]
	n, err := strconv.ParseInt(pos[1], 10, 64)
	if err != nil || n < 1 {
		return usageError("semaphore set %s %s: N, the number of permits, must be a whole number of at least 1", quote(name), pos[1])
	}
	if err := checkOwnName("NAME", name); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	var before lease.Semaphore
	declared := true
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		var err error
		before, err = c.lease.Semaphore(ctx, name)
		if errors.Is(err, lease.ErrUnknownSemaphore) {
			declared, err = false, nil
		}
		if err != nil {
			return err
		}
		return c.lease.SetPermits(ctx, name, n)
	})
	if err != nil {
		return err
	}
	switch {
	case !declared:
		a.note("Declared semaphore %s with %s in table %s.\n", printable(name), counted(n, "permit"), c.table)
	case before.Permits == n:
		a.note("Semaphore %s has %s already.\n", printable(name), counted(n, "permit"))
	default:
		a.note("Semaphore %s has %s (it had %d).\n", printable(name), counted(n, "permit"), before.Permits)
	}
	if declared && int64(before.InUse()) > n {
		a.note("%s in use, more than %d: they stay valid until released, and none is granted until fewer than %d are held.\n",
			counted(before.InUse(), "permit")+" are", n, n)
	}
	return nil
}

func (a *app) getSemaphore(args []string) error {
	fs := a.newFlagSet("semaphore")
	timeout := readTimeoutFlag(fs)
	output := outputFlag(fs, "text", "json")
	name, argv, err := a.parseOne(fs, args, "NAME")
	if err != nil {
		return err
	}
	if err := firstError(noCommand(fs, argv), checkName("NAME", name)); err != nil {
		return err
	}
	c, err := a.connect()
	if err != nil {
		return err
	}
	defer c.close()
	var s lease.Semaphore
	err = a.read(c, timeout.get(), func(ctx context.Context) error {
		var err error
		s, err = c.lease.Semaphore(ctx, name)
		if errors.Is(err, lease.ErrUnknownSemaphore) {
			return undeclared(c, name)
		}
		return err
	})
	if err != nil {
		return err
	}
	out := semaphoreDetailJSON{Name: s.Name, Permits: s.Permits, InUse: s.InUse(), Holders: []permitJSON{}}
	for _, h := range s.Holders {
		out.Holders = append(out.Holders, permitJSON{holderJSON: toJSON(h), Slot: h.Slot})
	}
	if *output == "json" {
		return writeJSON(a.stdout, out)
	}
	return printSemaphore(a.stdout, out)
}

// counted is "1 permit" or "N permits": n and word, made plural unless n
// is 1, wherever spannerlock prints a count.
func counted[N ~int | ~int64](n N, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// undeclared says how to declare the semaphore name.
func undeclared(c *conn, name string) error {
	return fmt.Errorf("semaphore %s is not declared in table %s: declare it and its number of permits with "+
		"'spannerlock semaphore set %s N', the spannerlock_semaphore Terraform resource, or lease.Client.SetPermits from Go",
		quote(name), c.table, printable(name))
}

func printSemaphore(w io.Writer, s semaphoreDetailJSON) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	say(tw, "SEMAPHORE\tPERMITS\tIN USE\n%s\t%d\t%d\n", printable(s.Name), s.Permits, s.InUse)
	_ = tw.Flush() // into a strings.Builder, which cannot fail
	if len(s.Holders) > 0 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		say(tw, "SLOT\tHOLDER\tTOKEN\tEXPIRES\n")
		for _, h := range s.Holders {
			say(tw, "%d\t%s\t%d\t%s\n", h.Slot, printable(h.HolderID), h.Token, shortTime(h.ExpiresAt))
		}
		_ = tw.Flush()
	}
	_, err := io.WriteString(w, b.String())
	return err
}
