package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Vars is the set of settings one program reads. Each setting comes from a
// CHATD_* environment variable and a command-line flag of the same name in
// lower case overrides it (CHATD_GRPC_ADDR → --grpc-addr). An environment
// variable set to the empty string counts as unset.
//
// Settings are declared with Var (or a typed helper such as Addr), then read
// once with Parse, which validates every value and reports all bad ones at
// once, each error naming the variable or flag that supplied it.
type Vars struct {
	program  string
	summary  string
	settings []*setting
	checks   []check
}

// setting is one declared variable and the raw value Parse chose for it.
type setting struct {
	env    string
	flag   string
	def    string
	usage  string
	secret bool
	parse  func(raw string) error

	raw    string
	source string
}

// NewVars returns an empty set of settings for program (the name --help
// shows); summary is a one-line description of the program.
func NewVars(program, summary string) *Vars {
	return &Vars{program: program, summary: summary}
}

// FlagName returns the flag that overrides env: CHATD_GRPC_ADDR → grpc-addr.
func FlagName(env string) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "CHATD_")), "_", "-")
}

// Var declares the setting env with default def (shown by --help; "" shows
// as "none") and a one-sentence meaning. parse receives the chosen raw value
// (the flag's, else the environment's, else def), stores it, and returns an
// error saying what is wrong with it; Parse prefixes the error with its
// source. Declaring the same env twice panics: it is a programming error.
func (v *Vars) Var(env, def, usage string, parse func(raw string) error) {
	v.add(&setting{env: env, flag: FlagName(env), def: def, usage: usage, parse: parse})
}

// SecretVar is Var for a value that must never be printed: --help shows
// whether it is set, never its default or value.
func (v *Vars) SecretVar(env, usage string, parse func(raw string) error) {
	v.add(&setting{env: env, flag: FlagName(env), usage: usage, secret: true, parse: parse})
}

func (v *Vars) add(s *setting) {
	if !strings.HasPrefix(s.env, "CHATD_") {
		panic(fmt.Sprintf("service: setting %q does not start with CHATD_", s.env))
	}
	for _, o := range v.settings {
		if o.env == s.env {
			panic(fmt.Sprintf("service: setting %s declared twice", s.env))
		}
	}
	v.settings = append(v.settings, s)
}

// check is a validation and the settings (env names) it reads.
type check struct {
	fn       func() error
	settings []string
}

// Check adds a validation for rules that span settings (or require one);
// its error should name them. It runs after the settings it reads parsed
// without error, so one pass reports every problem at once; with no
// settings named it runs only when every setting parsed.
func (v *Vars) Check(fn func() error, settings ...string) {
	v.checks = append(v.checks, check{fn: fn, settings: settings})
}

// blockedBy reports whether a setting c reads failed to parse (with none
// named: whether any did).
func (c check) blockedBy(failed map[string]bool) bool {
	if len(c.settings) == 0 {
		return len(failed) > 0
	}
	for _, env := range c.settings {
		if failed[env] {
			return true
		}
	}
	return false
}

// Parse reads every declared setting from lookupEnv (os.LookupEnv in a real
// program) and args (the command line without the program name). It returns
// flag.ErrHelp when args ask for help (-h, --help), an *InvalidError listing
// every bad setting, or another error for a malformed command line.
func (v *Vars) Parse(args []string, lookupEnv func(string) (string, bool)) error {
	fs := flag.NewFlagSet(v.program, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	for _, s := range v.settings {
		s.raw, s.source = s.def, s.env
		if val, ok := lookupEnv(s.env); ok && val != "" {
			s.raw = val
		}
		fs.Func(s.flag, s.usage, func(val string) error {
			s.raw, s.source = val, "--"+s.flag
			return nil
		})
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (settings are flags such as --grpc-addr=:7001)", fs.Arg(0))
	}
	var errs []error
	failed := map[string]bool{}
	for _, s := range v.settings {
		if err := s.parse(s.raw); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.source, err))
			failed[s.env] = true
		}
	}
	for _, c := range v.checks {
		if c.blockedBy(failed) {
			continue
		}
		if err := c.fn(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return &InvalidError{Errs: errs}
	}
	return nil
}

// InvalidError is Parse's error for settings with bad values.
type InvalidError struct {
	// Errs holds one error per bad setting, each reading
	// "<SOURCE>: <what is wrong>".
	Errs []error
}

func (e *InvalidError) Error() string { return errors.Join(e.Errs...).Error() }

// Unwrap returns the individual errors.
func (e *InvalidError) Unwrap() []error { return e.Errs }

// Usage writes the --help text: the program, its summary, and for each
// setting its variable, flag, default and meaning.
func (v *Vars) Usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n", v.program)
	if v.summary != "" {
		fmt.Fprintf(w, "%s\n\n", v.summary)
	}
	fmt.Fprintf(w, "Every setting is read from its environment variable; the flag beside it overrides it.\n\n")
	for _, s := range v.settings {
		def := fmt.Sprintf("default %q", s.def)
		switch {
		case s.secret:
			def = "secret, no default"
		case s.def == "":
			def = "no default"
		}
		fmt.Fprintf(w, "  %s, --%s (%s)\n        %s\n", s.env, s.flag, def, s.usage)
	}
}

// Names returns the declared environment variables in declaration order.
func (v *Vars) Names() []string {
	names := make([]string, len(v.settings))
	for i, s := range v.settings {
		names[i] = s.env
	}
	return names
}
