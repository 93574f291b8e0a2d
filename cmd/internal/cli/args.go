package cli

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// strictArgs makes every command of the tree that takes no arguments
// (cobra.NoArgs, or no Args at all) refuse one with a one-line error and a
// suggestion (see noArgs). A command with an Args rule of its own keeps
// it.
func strictArgs(cmd *cobra.Command) {
	if cmd.Args == nil || sameFunc(cmd.Args, cobra.NoArgs) {
		cmd.Args = noArgs
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which SuggestionsFor alone does not apply
	}
	for _, sub := range cmd.Commands() {
		strictArgs(sub)
	}
}

func sameFunc(a, b cobra.PositionalArgs) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}

// labCommands are the commands of workrouter-lab that workrouter lacks.
var labCommands = []string{"broker", "demo", "chaos", "bench"}

// noArgs refuses arguments. For a command with subcommands the argument is
// an unknown command, and the error suggests the nearest ones (cobra's
// SuggestionsFor); for the others it is an unexpected argument, and the
// error suggests the nearest flag. The error is one line; main prints it
// and exits 1.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	arg := args[0]
	if cmd.HasAvailableSubCommands() {
		msg := fmt.Sprintf("unknown command %q for %q", arg, cmd.CommandPath())
		if !cmd.HasParent() && slices.Contains(labCommands, arg) {
			// A command of the lab typed to the product (docs or habits
			// from before the split): say where it is.
			return fmt.Errorf("%s; %s is a command of workrouter-lab, the development binary (go run ./cmd/workrouter-lab %s)", msg, arg, arg)
		}
		if s := cmd.SuggestionsFor(arg); len(s) > 0 {
			return fmt.Errorf("%s; did you mean %s?", msg, orList(s, ""))
		}
		return fmt.Errorf("%s; the commands are %s (see %s --help)", msg, orList(commandNames(cmd), ""), cmd.CommandPath())
	}
	msg := fmt.Sprintf("unexpected argument %q for %q, which takes flags only", arg, cmd.CommandPath())
	if s := flagSuggestions(cmd, strings.SplitN(arg, "=", 2)[0]); len(s) > 0 {
		return fmt.Errorf("%s; did you mean %s?", msg, orList(s, "--"))
	}
	return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
}

// flagError is every command's flag error function: pflag's error about
// an unknown flag gets the nearest flags as a suggestion, and a flag after
// an unknown command reports the command.
func flagError(cmd *cobra.Command, err error) error {
	// "workrouter brokr --topic x": the unknown command is the news, not
	// the flag that only its subcommand would know.
	if args := cmd.Flags().Args(); cmd.HasAvailableSubCommands() && len(args) > 0 {
		return noArgs(cmd, args)
	}
	msg := err.Error()
	var name string
	switch {
	case strings.HasPrefix(msg, "unknown flag: --"):
		name = strings.TrimPrefix(msg, "unknown flag: --")
	case strings.HasPrefix(msg, "unknown shorthand flag: "):
		// "unknown shorthand flag: 'x' in -xyz": suggest for the word.
		if _, word, ok := strings.Cut(msg, " in -"); ok {
			name = word
		}
	default:
		return err
	}
	if s := flagSuggestions(cmd, name); len(s) > 0 {
		return fmt.Errorf("%w for %q; did you mean %s?", err, cmd.CommandPath(), orList(s, "--"))
	}
	return fmt.Errorf("%w for %q (see %s --help)", err, cmd.CommandPath(), cmd.CommandPath())
}

// flagSuggestions returns the names of cmd's flags close to typed (by edit
// distance, as cobra suggests commands, or by prefix).
func flagSuggestions(cmd *cobra.Command, typed string) []string {
	typed = strings.ToLower(strings.TrimLeft(typed, "-"))
	if typed == "" {
		return nil
	}
	var out []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		if levenshtein(typed, f.Name) <= 2 || (len(typed) > 1 && strings.HasPrefix(f.Name, typed)) {
			out = append(out, f.Name)
		}
	})
	return out
}

// levenshtein is the edit distance between a and b.
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// orList formats names as "a", "a or b", "a, b or c", each with prefix.
func orList(names []string, prefix string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = prefix + n
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " or " + q[len(q)-1]
}

// commandNames lists cmd's available subcommands.
func commandNames(cmd *cobra.Command) []string {
	var out []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			out = append(out, c.Name())
		}
	}
	return out
}

// newHelpCmd replaces cobra's help command, which prints "Unknown help
// topic" and exits 0: `workrouter help frobnicate` fails like
// `workrouter frobnicate` does.
func newHelpCmd(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "help shows the help of any command, e.g. workrouter help fences reset.",
		RunE: func(cmd *cobra.Command, args []string) error {
			target, rest, err := root.Find(args)
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				if err := noArgs(target, rest); err != nil {
					return err
				}
				return errors.New("unknown help topic")
			}
			return target.Help()
		},
	}
}
