package main

import (
	"flag"
	"io"
	"slices"
	"strings"
	"text/template"
)

func completionCommand() *command {
	return &command{
		name:     "completion",
		summary:  "print the shell completion script for bash, zsh or fish",
		synopsis: "spannerlock completion bash|zsh|fish",
		help: `
Prints a script that completes spannerlock's commands, subcommands, flags
and the values of -o and --log-format in bash, zsh or fish; after --, CMD
as a command and its arguments with CMD's own completion, as for sudo.
Load it in the shell's start-up file.

Examples:
  # bash (~/.bashrc):
  source <(spannerlock completion bash)

  # zsh (~/.zshrc, after compinit):
  source <(spannerlock completion zsh)

  # fish:
  spannerlock completion fish > ~/.config/fish/completions/spannerlock.fish`,
		run: runCompletion,
	}
}

// completionShells are the shells completion writes for.
var completionShells = []string{"bash", "zsh", "fish"}

func runCompletion(a *app, args []string) error {
	fs := a.newFlagSet("completion")
	pos, argv, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if err := noCommand(fs, argv); err != nil {
		return err
	}
	if len(pos) != 1 || !slices.Contains(completionShells, pos[0]) {
		return usageError("completion takes the shell: %s", strings.Join(completionShells, ", "))
	}
	global, cmds := describeCommands()
	return writeCompletion(a.stdout, pos[0], global, cmds)
}

// commandInfo is what completion knows of a command.
type commandInfo struct {
	Name, Summary string
	Flags         []flagInfo
	// Words are what its first argument may be (semaphore's subcommands).
	Words []string
}

// flagInfo is a flag as completion offers it.
type flagInfo struct {
	Name, Short, Usage string
	// TakesValue is set for flags that take a value; Choices are the
	// values, when they are a few words.
	TakesValue bool
	Choices    []string
}

// describeCommands describes every command for completion, with the flags
// its run function registers: each runs with --help on an app that hands
// back the flag set instead of printing it.
func describeCommands() (global []flagInfo, cmds []commandInfo) {
	global = describeFlags(defaultApp().newFlagSet(""), func(string) bool { return true })
	for _, c := range commands() {
		info := commandInfo{Name: c.name, Summary: c.summary}
		a := defaultApp()
		var fs *flag.FlagSet
		a.describe = &fs
		args := []string{"--help"}
		switch c.name {
		case "semaphore":
			args, info.Words = []string{"get", "--help"}, []string{"set", "get"}
		case "completion":
			info.Words = completionShells
		}
		if err := c.run(a, args); err == errHelp && fs != nil {
			info.Flags = describeFlags(fs, func(name string) bool { return !slices.Contains(globalFlagNames, name) })
		}
		cmds = append(cmds, info)
	}
	cmds = append(cmds, commandInfo{Name: "help", Summary: "show help on a command or a topic", Words: helpWords()})
	return global, cmds
}

// defaultApp is an app that runs nothing: for describing commands.
func defaultApp() *app {
	return &app{stdout: io.Discard, stderr: io.Discard, global: defaultGlobalFlags(),
		onCommandLine: map[string]bool{}, fromEnv: map[string]bool{}}
}

func describeFlags(fs *flag.FlagSet, keep func(string) bool) []flagInfo {
	short := map[string]string{}
	for s, long := range flagAliases {
		short[long] = s
	}
	var out []flagInfo
	fs.VisitAll(func(f *flag.Flag) {
		if _, alias := flagAliases[f.Name]; alias || !keep(f.Name) {
			return
		}
		_, usage := flag.UnquoteUsage(f)
		info := flagInfo{Name: f.Name, Usage: strings.SplitN(usage, "; ", 2)[0]}
		if fs.Lookup(short[f.Name]) != nil {
			info.Short = short[f.Name]
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			info.TakesValue = true
		}
		if c, ok := f.Value.(choiceValue); ok {
			info.Choices = c.choices
		}
		out = append(out, info)
	})
	return out
}

func writeCompletion(w io.Writer, shell string, global []flagInfo, cmds []commandInfo) error {
	var valueFlags []string
	for _, f := range global {
		if f.TakesValue {
			valueFlags = append(valueFlags, "--"+f.Name)
		}
	}
	for _, c := range cmds {
		for _, f := range c.Flags {
			if f.TakesValue && !slices.Contains(valueFlags, "--"+f.Name) {
				valueFlags = append(valueFlags, "--"+f.Name)
				if f.Short != "" {
					valueFlags = append(valueFlags, "-"+f.Short)
				}
			}
		}
	}
	script := completionScripts[shell]
	if shell == "zsh" {
		// zsh runs the bash function through bashcompinit, so that the two
		// complete alike, but after -- hands CMD to zsh's own completion.
		script = "# zsh completion for spannerlock: source <(spannerlock completion zsh), after compinit\n" +
			"autoload -U +X bashcompinit && bashcompinit\n" + completionScripts["bash"] + zshCompletion
	}
	// choices are the values a flag takes, by flag and command ("" for a
	// global flag), for the shells that complete them in one place.
	type choice struct{ Command, Words string }
	choices := map[string][]choice{}
	var choiceFlags []string
	add := func(command string, f flagInfo) {
		if len(f.Choices) == 0 {
			return
		}
		pattern := "--" + f.Name
		if f.Short != "" {
			pattern = "-" + f.Short + "|" + pattern
		}
		if choices[pattern] == nil {
			choiceFlags = append(choiceFlags, pattern)
		}
		choices[pattern] = append(choices[pattern], choice{command, strings.Join(f.Choices, " ")})
	}
	for _, f := range global {
		add("", f)
	}
	for _, c := range cmds {
		for _, f := range c.Flags {
			add(c.Name, f)
		}
	}
	var commandNames []string
	for _, c := range cmds {
		commandNames = append(commandNames, c.Name)
	}
	t := template.Must(template.New(shell).Funcs(template.FuncMap{
		"join":  strings.Join,
		"quote": shellQuote,
		"names": flagNames,
	}).Parse(script))
	return t.Execute(w, map[string]any{"Global": global, "Commands": cmds, "ValueFlags": valueFlags,
		"ChoiceFlags": choiceFlags, "Choices": choices, "CommandNames": commandNames})
}

// flagNames are the words of flags on the command line.
func flagNames(flags []flagInfo) string {
	var out []string
	for _, f := range flags {
		out = append(out, "--"+f.Name)
		if f.Short != "" {
			out = append(out, "-"+f.Short)
		}
	}
	return strings.Join(out, " ")
}

// shellQuote quotes s for a POSIX shell and fish: in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// zshCompletion follows the bash function in zsh's script: after --, CMD
// and its arguments are completed as zsh completes them on a line of their
// own (CMD's own completion, as sudo's and nice's are), by _normal with
// the words before CMD shifted off; before it, the bash function does.
const zshCompletion = `_spannerlock_zsh() {
    local i
    for ((i = 2; i < CURRENT; i++)); do
        case ${words[i]} in
            --)
                shift $i words
                ((CURRENT -= i))
                _normal
                return ;;
            {{join .ValueFlags "|"}}) ((i++)) ;;
        esac
    done
    _bash_complete -o default -F _spannerlock
}
compdef _spannerlock_zsh spannerlock
`

var completionScripts = map[string]string{
	// bash: the word under the cursor is completed from the command found
	// so far; after --, CMD is completed as a command, then as files.
	"bash": `# bash completion for spannerlock: source <(spannerlock completion bash)
_spannerlock() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local cmd="" sub="" i w
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${COMP_WORDS[i]}
        case $w in
            --)
                if ((i == COMP_CWORD - 1)); then
                    COMPREPLY=($(compgen -c -- "$cur" | sort -u))
                elif declare -F _command_offset >/dev/null; then
                    _command_offset $((i + 1)) # bash-completion's, as sudo's
                else
                    _spannerlock_cmd $((i + 1))
                fi
                return 0 ;;
            {{join .ValueFlags "|"}}) ((i++)) ;;
            -*) ;;
            *) if [[ -z $cmd ]]; then cmd=$w; elif [[ -z $sub ]]; then sub=$w; fi ;;
        esac
    done
    case $prev in
{{- range $flag := .ChoiceFlags}}
        {{$flag}})
            case $cmd in
{{- range index $.Choices $flag}}
                {{if .Command}}{{.Command}}{{else}}*{{end}}) COMPREPLY=($(compgen -W {{quote .Words}} -- "$cur")) ;;
{{- end}}
            esac
            return 0 ;;
{{- end}}
        {{join .ValueFlags "|"}}) return 0 ;;
    esac
    local words
    case $cmd in
        "") words={{quote (join .CommandNames " ")}} ;;
{{- range .Commands}}
        {{.Name}}) words={{quote (names .Flags)}}{{if .Words}}
            [[ -z $sub && $cur != -* ]] && words={{quote (join .Words " ")}}{{end}} ;;
{{- end}}
    esac
    [[ $cur == -* ]] && words+=' '{{quote (names .Global)}}
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
# _spannerlock_cmd completes CMD's arguments with CMD's own completion
# function, where bash-completion (whose _command_offset does it fully)
# is not loaded; with none, -o default completes files.
_spannerlock_cmd() {
    local off=$1 cmd=${COMP_WORDS[$1]} spec
    spec=$(complete -p -- "$cmd" 2>/dev/null) || return 0
    [[ $spec =~ -F\ ([^ ]+) ]] || return 0
    local fn=${BASH_REMATCH[1]}
    COMP_WORDS=("${COMP_WORDS[@]:off}")
    ((COMP_CWORD -= off))
    "$fn" "$cmd" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
}
complete -o default -F _spannerlock spannerlock
`,
	// fish: a complete line per command and flag.
	"fish": `# fish completion for spannerlock: spannerlock completion fish > ~/.config/fish/completions/spannerlock.fish
function __spannerlock_command
    set -l words (commandline -opc)
    for w in $words[2..-1]
        switch $w
            case --
                return 1
            case '-*'
            case '*'
                echo $w
                return 0
        end
    end
    return 1
end
function __spannerlock_command_is
    set -l c (__spannerlock_command)
    and test "$c" = "$argv[1]"
end
function __spannerlock_after_dashes
    contains -- -- (commandline -opc)
end
function __spannerlock_cmd
    set -l words (commandline -opc) (commandline -ct)
    set -l i (contains -i -- -- $words)
    set -l rest $words[(math $i + 1)..-1]
    if test (count $rest) -le 1
        __fish_complete_command
    else
        complete -C (string join ' ' -- (string escape -- $rest))
    end
end
complete -c spannerlock -f
complete -c spannerlock -n __spannerlock_after_dashes -x -a '(__spannerlock_cmd)'
{{- range .Global}}
complete -c spannerlock -n 'not __spannerlock_after_dashes' -l {{.Name}}{{if .TakesValue}} -x{{end}}{{if .Choices}} -a {{quote (join .Choices " ")}}{{end}} -d {{quote .Usage}}
{{- end}}
{{- range .Commands}}
complete -c spannerlock -n 'not __spannerlock_command' -a {{.Name}} -d {{quote .Summary}}
{{- $c := .}}{{range .Flags}}
complete -c spannerlock -n '__spannerlock_command_is {{$c.Name}}; and not __spannerlock_after_dashes' -l {{.Name}}{{if .Short}} -s {{.Short}}{{end}}{{if .TakesValue}} -x{{end}}{{if .Choices}} -a {{quote (join .Choices " ")}}{{end}} -d {{quote .Usage}}
{{- end}}{{if .Words}}
complete -c spannerlock -n '__spannerlock_command_is {{.Name}}' -a {{quote (join .Words " ")}}
{{- end}}{{end}}
`,
}
