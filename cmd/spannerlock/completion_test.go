//go:build unix

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// completionScript writes spannerlock's completion script for shell into
// dir and returns its path.
func completionScript(t *testing.T, dir, shell string) string {
	t.Helper()
	r := run(t, dir, env(""), nil, "completion", shell)
	if r.code != 0 {
		t.Fatalf("completion %s: exit %d: %s", shell, r.code, r.stderr)
	}
	path := filepath.Join(dir, "spannerlock."+shell)
	if err := os.WriteFile(path, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// bash completes commands, subcommands, each command's flags, the global
// flags, the values of -o (per command) and --log-format, help topics, and
// CMD after -- as a command.
func TestCompletionBash(t *testing.T) {
	dir := t.TempDir()
	script := completionScript(t, dir, "bash")
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"spannerlock lo", []string{"lock"}},
		{"spannerlock --table jobs sem", []string{"semaphore"}},
		{"spannerlock semaphore ", []string{"set", "get"}},
		{"spannerlock lock --t", []string{"--timeout", "--try", "--table", "--ttl"}},
		{"spannerlock status -o ", []string{"table", "json"}},
		{"spannerlock elect --output ", []string{"text", "json"}},
		{"spannerlock --log-format ", []string{"text", "json"}},
		{"spannerlock run-once --d", []string{"--done-exit-code", "--database"}},
		{"spannerlock help exit", []string{"exit-status"}},
		{"spannerlock completion ", []string{"bash", "zsh", "fish"}},
		{"spannerlock lock x -- printen", []string{"printenv"}},
	} {
		words := strings.Split(tc.line, " ")
		cmd := exec.Command("bash", "-c", `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _spannerlock; printf '%s\n' "${COMPREPLY[@]}"`,
			"bash", script)
		cmd.Args = append(cmd.Args, words...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		if got := strings.Fields(string(out)); !sameWords(got, tc.want) {
			t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
		}
	}
}

// After -- CMD's arguments are completed by CMD's own completion, as
// sudo's are: through bash-completion's _command_offset when it is loaded,
// else by calling the function CMD's completion names.
func TestCompletionBashCompletesCMDsArguments(t *testing.T) {
	dir := t.TempDir()
	script := completionScript(t, dir, "bash")
	// mycmd completes its first argument from two words.
	const mycmd = `_mycmd() { COMPREPLY=($(compgen -W "alpha beta" -- "$2")); }; complete -F _mycmd mycmd`
	loaders := map[string]string{"without bash-completion": ""}
	if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); err == nil {
		loaders["with bash-completion"] = "source /usr/share/bash-completion/bash_completion"
	}
	for name, load := range loaders {
		for _, tc := range []struct {
			line string
			want []string
		}{
			{"spannerlock lock x -- mycmd al", []string{"alpha"}},
			{"spannerlock --table t run-once j --every 1h -- mycmd ", []string{"alpha", "beta"}},
		} {
			words := strings.Split(tc.line, " ")
			cmd := exec.Command("bash", "-c", load+"\n"+mycmd+`
source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _spannerlock; printf '%s\n' "${COMPREPLY[@]}"`,
				"bash", script)
			cmd.Args = append(cmd.Args, words...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %q: %v\n%s", name, tc.line, err, out)
			}
			if got := strings.Fields(string(out)); !sameWords(got, tc.want) {
				t.Errorf("%s: %q completes to %q, want %q", name, tc.line, got, tc.want)
			}
		}
	}
}

func sameWords(got, want []string) bool {
	seen := map[string]bool{}
	for _, w := range got {
		seen[w] = true
	}
	if len(seen) != len(want) {
		return false
	}
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

// fish completes as bash does, with each flag's description.
func TestCompletionFish(t *testing.T) {
	if _, err := exec.LookPath("fish"); err != nil {
		t.Skip("fish is not installed")
	}
	dir := t.TempDir()
	script := completionScript(t, dir, "fish")
	for line, want := range map[string][]string{
		"spannerlock lo":             {"lock"},
		"spannerlock semaphore ":     {"set", "get"},
		"spannerlock status -o ":     {"table", "json"},
		"spannerlock lock --tr":      {"--try"},
		"spannerlock lock x -- prin": {"printenv", "printf"},
	} {
		out, err := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line).CombinedOutput()
		if err != nil {
			t.Fatalf("%q: %v\n%s", line, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			got = append(got, strings.SplitN(l, "\t", 2)[0])
		}
		for _, w := range want {
			if !strings.Contains(" "+strings.Join(got, " ")+" ", " "+w+" ") {
				t.Errorf("%q completes to %q, want %q among them", line, got, w)
			}
		}
		if strings.Contains(string(out), "Missing argument") {
			t.Errorf("%q: fish complains:\n%s", line, out)
		}
	}
}

// zsh loads the script (which runs bash's function, tested above, through
// bashcompinit, but for CMD after --) and registers it for spannerlock.
func TestCompletionZsh(t *testing.T) {
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh is not installed")
	}
	dir := t.TempDir()
	script := completionScript(t, dir, "zsh")
	out, err := exec.Command("zsh", "-f", "-c", `autoload -U compinit && compinit -u -d "$2" && source "$1" && print -r -- $_comps[spannerlock]`,
		"zsh", script, filepath.Join(dir, "zcompdump")).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "_spannerlock_zsh" {
		t.Fatalf("zsh: %v\n%s", err, out)
	}
}

// zshTab types a line and a Tab into an interactive zsh in a pseudo-terminal
// (zsh's zpty), with compinit, the script ($1) and mycmd's completion loaded,
// and prints the matches the completion offered, one a line: compadd is
// wrapped to record them, and the widget bound to Tab writes them to
// $2/matches once the completion ended.
const zshTab = `zmodload zsh/zpty || exit 2
script=$1 dir=$2 line=$3 out=$2/matches
zpty z zsh -f -i
zpty -w z "PS1= RPS1= PROMPT_EOL_MARK="
zpty -w z "autoload -U compinit && compinit -u -d ${(q)dir}/zcompdump && source ${(q)script}"
zpty -w z '_mycmd() { compadd alpha beta }; compdef _mycmd mycmd'
zpty -w z 'compadd() { if ((${argv[(I)-[OAD]*]})); then builtin compadd "$@"; return; fi; local -a m; builtin compadd -A m "$@"; print -rl -- $m >> '${(q)out}.part'; builtin compadd "$@"; }'
zpty -w z '_test_done() { mv '${(q)out}.part' '${(q)out}'; }'
zpty -w z 'zstyle ":completion:*" insert-tab false; _test_tab() { : > '${(q)out}.part'; comppostfuncs=(_test_done); zle complete-word; }; zle -N _test_tab; bindkey "^I" _test_tab'
zpty -w -n z "$line"$'\t'
for ((i = 0; i < 1200; i++)); do
  [[ -e $out ]] && break
  zpty -r -t z junk 2>/dev/null # keep the terminal from filling up
  sleep 0.05
done
zpty -d z
[[ -e $out ]] || { print -u2 "no completion within a minute"; exit 1; }
cat $out
`

// After -- zsh completes CMD as a command and its arguments with CMD's own
// completion (mycmd's offers alpha and beta), as it does sudo's, not as
// files (alfile is one); before --, as bash does.
func TestCompletionZshCompletesCMDsArguments(t *testing.T) {
	if _, err := exec.LookPath("zsh"); err != nil {
		t.Skip("zsh is not installed")
	}
	dir := t.TempDir()
	script := completionScript(t, dir, "zsh")
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "mycmd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alfile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	type zshCase struct {
		line string
		want []string
		// some: want is among the matches, not all of them
		some bool
	}
	cases := []zshCase{
		{line: "spannerlock lock x -- mycmd al", want: []string{"alpha"}},
		{line: "spannerlock --table t run-once j --every 1h -- mycmd ", want: []string{"alpha", "beta"}},
		{line: "spannerlock lock x -- mycm", want: []string{"mycmd"}},
		{line: "spannerlock lock --tr", want: []string{"--try"}},
		{line: "spannerlock status -o ", want: []string{"table", "json"}},
	}
	if _, err := exec.LookPath("git"); err == nil {
		// zsh's own completion for git, as the issue tried it
		cases = append(cases, zshCase{line: "spannerlock lock x -- git checko", want: []string{"checkout"}, some: true})
	}
	for _, tc := range cases {
		cmd := exec.Command("zsh", "-f", "-c", zshTab, "zsh", script, dir, tc.line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%q: %v\n%s", tc.line, err, out)
		}
		_ = os.Remove(filepath.Join(dir, "matches"))
		got := strings.Fields(string(out))
		if tc.some {
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("%q completes to %q, want %q among them", tc.line, got, w)
				}
			}
		} else if !sameWords(got, tc.want) {
			t.Errorf("%q completes to %q, want %q", tc.line, got, tc.want)
		}
	}
}
