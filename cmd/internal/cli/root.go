package cli

import (
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// envPrefix is prepended to a flag's upper-snake name to find the environment
// variable that sets it.
const envPrefix = "WORKROUTER_"

// NewRoot builds a command tree named use (workrouter, workrouter-lab)
// with cmds under it. Subcommands must not set their own
// PersistentPreRunE: the root's applies the WORKROUTER_* environment.
func NewRoot(use, short, long string, cmds ...*cobra.Command) *cobra.Command {
	root := &cobra.Command{
		Use:   use,
		Short: short,
		Long: long + `

Every flag can also be set from the environment as WORKROUTER_<FLAG_NAME>
(e.g. --data-dir is WORKROUTER_DATA_DIR); the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.NoArgs,
		// Runnable, so that arguments are checked (an unknown command is an
		// error, not the help and exit 0); without any it shows the help.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := ApplyEnv(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			if err := checkNotEmpty(cmd.Flags()); err != nil {
				return err
			}
			// Every command, also one that logs nothing (version), refuses
			// a log level or format it does not know.
			_, _, err := logSettings(cmd)
			return err
		},
	}
	root.PersistentFlags().String("log-level", "info", "log level on stderr: debug, info, warn or error")
	root.PersistentFlags().String("log-format", "text", "log format on stderr: text or json")

	root.AddCommand(cmds...)

	// Last, so that they cover every command added above.
	annotateEnv(root)
	strictArgs(root)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(newHelpCmd(root))
	return root
}

// Root builds the product's command tree, workrouter.
func Root() *cobra.Command {
	return NewRoot("workrouter", "Route keyed commands through Kafka to fenced, per-partition workers",
		`workrouter routes keyed commands through Kafka to per-partition workers
whose side effects are fenced by partition epochs.`, Commands()...)
}

// EnvName returns the environment variable that sets the flag called name.
func EnvName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// ApplyEnv sets every flag in fs that was not given on the command line from
// its WORKROUTER_* environment variable, if that is set and not empty. A
// comma-separated value fills a repeatable flag. lookup is os.LookupEnv
// outside tests.
func ApplyEnv(fs *pflag.FlagSet, lookup func(string) (string, bool)) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		// --yes confirms a destructive action: only a person typing it counts.
		if err != nil || f.Changed || f.Name == "help" || f.Name == "yes" {
			return
		}
		v, ok := lookup(EnvName(f.Name))
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			if isSecretFlag(f) {
				err = fmt.Errorf("%s (for --%s): invalid value", EnvName(f.Name), f.Name)
				return
			}
			err = fmt.Errorf("%s=%q (for --%s): %w", EnvName(f.Name), v, f.Name, serr)
		}
	})
	return err
}

// annotateEnv appends the environment variable's name to the help text of
// every flag of cmd and its subcommands.
func annotateEnv(cmd *cobra.Command) {
	note := func(f *pflag.Flag) {
		if f.Name == "help" || f.Name == "yes" || strings.Contains(f.Usage, envPrefix) {
			return
		}
		f.Usage += " [env " + EnvName(f.Name) + "]"
	}
	cmd.LocalNonPersistentFlags().VisitAll(note)
	cmd.PersistentFlags().VisitAll(note)
	for _, sub := range cmd.Commands() {
		annotateEnv(sub)
	}
}

// notEmptyAnnotation marks a flag that, when given, must not be empty
// (see notEmpty).
const notEmptyAnnotation = "workrouter-not-empty"

// notEmpty marks the flags of fl called names as refusing an empty value
// when given: `--group ""` (a script's unset variable) is an error, not
// the flag's default.
func notEmpty(fl *pflag.FlagSet, names ...string) {
	for _, n := range names {
		if err := fl.SetAnnotation(n, notEmptyAnnotation, []string{"true"}); err != nil {
			panic(err) // a flag name that does not exist: a bug of this file's callers
		}
	}
}

// checkNotEmpty fails for the first flag of fs marked by notEmpty that
// was given with an empty (or blank) value.
func checkNotEmpty(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[notEmptyAnnotation]; err == nil && ok && f.Changed && strings.TrimSpace(f.Value.String()) == "" {
			err = fmt.Errorf("--%s is given but empty (an unset variable?): give a value, or leave the flag out", f.Name)
		}
	})
	return err
}

// logSettings returns the --log-level and --log-format of cmd, failing
// with one line for a value it does not know.
func logSettings(cmd *cobra.Command) (slog.Level, string, error) {
	name, err := cmd.Flags().GetString("log-level")
	if err != nil {
		return 0, "", err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(name)); err != nil {
		return 0, "", fmt.Errorf("--log-level %q: want debug, info, warn or error", name)
	}
	format, err := cmd.Flags().GetString("log-format")
	if err != nil {
		return 0, "", err
	}
	if format != "text" && format != "json" {
		return 0, "", fmt.Errorf("--log-format %q: want text or json", format)
	}
	return level, format, nil
}

// NewLogger returns the slog logger a command should use: on the command's
// stderr, in the --log-format and at the --log-level it was given.
func NewLogger(cmd *cobra.Command) (*slog.Logger, error) {
	level, format, err := logSettings(cmd)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), opts)), nil
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), opts)), nil
}
