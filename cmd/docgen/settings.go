package main

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/chatd/chatd/pkg/service"
	"github.com/chatd/chatd/services/api/apiserver"
	"github.com/chatd/chatd/services/relay/relayserver"
	"github.com/chatd/chatd/services/stream/streamserver"
	"github.com/chatd/chatd/services/worker/workerserver"
)

// programs are the four services in the order the page's columns show them.
func programs() []service.Program {
	return []service.Program{apiserver.Program(), workerserver.Program(), streamserver.Program(), relayserver.Program()}
}

// setting is one declared setting as --help describes it.
type setting struct {
	Env     string
	Flag    string
	Default string // the default value; empty with NoDefault or Secret
	// NoDefault is a setting without a default ("none" on the page).
	NoDefault bool
	// Secret is a setting whose default and value are never printed.
	Secret bool
	Usage  string
}

// declared returns p's settings in declaration order. It reads them from
// the --help text (service.Vars.Usage), the one place the declarations are
// printed, and fails when that text holds a setting it cannot read or
// lacks one that Vars.Names lists, so a change of format cannot silently
// drop rows from the page.
func declared(p service.Program) ([]setting, error) {
	vars := service.NewVars("chatd-"+p.Name, p.Summary)
	p.Config.Declare(vars)
	var help bytes.Buffer
	vars.Usage(&help)
	settings, err := parseUsage(help.String())
	if err != nil {
		return nil, fmt.Errorf("error reading the %s service's settings: %w", p.Name, err)
	}
	names := vars.Names()
	if len(settings) != len(names) {
		return nil, fmt.Errorf("the %s service declares %d settings but its --help text yielded %d", p.Name, len(names), len(settings))
	}
	for i, s := range settings {
		if s.Env != names[i] {
			return nil, fmt.Errorf("the %s service's setting %d is %s but its --help text says %s", p.Name, i, names[i], s.Env)
		}
	}
	return settings, nil
}

// parseUsage reads the settings of a --help text: each is a line
// "  CHATD_X, --x (default "v")" (or "(no default)", "(secret, no
// default)") followed by an indented line with its meaning.
func parseUsage(help string) ([]setting, error) {
	var out []setting
	sc := bufio.NewScanner(strings.NewReader(help))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "  CHATD_") {
			continue
		}
		s, err := parseSettingLine(strings.TrimSpace(line))
		if err != nil {
			return nil, err
		}
		if !sc.Scan() {
			return nil, fmt.Errorf("%s has no meaning line", s.Env)
		}
		s.Usage = strings.TrimSpace(sc.Text())
		out = append(out, s)
	}
	return out, sc.Err()
}

func parseSettingLine(line string) (setting, error) {
	env, rest, ok := strings.Cut(line, ", --")
	if !ok {
		return setting{}, fmt.Errorf("cannot read setting line %q", line)
	}
	flag, def, ok := strings.Cut(rest, " (")
	if !ok || !strings.HasSuffix(def, ")") {
		return setting{}, fmt.Errorf("cannot read setting line %q", line)
	}
	def = strings.TrimSuffix(def, ")")
	s := setting{Env: env, Flag: "--" + flag}
	switch {
	case def == "secret, no default":
		s.Secret = true
	case def == "no default":
		s.NoDefault = true
	case strings.HasPrefix(def, "default "):
		v, err := strconv.Unquote(strings.TrimPrefix(def, "default "))
		if err != nil {
			return setting{}, fmt.Errorf("cannot read the default of %s in %q: %w", env, line, err)
		}
		s.Default = v
	default:
		return setting{}, fmt.Errorf("cannot read the default of %s in %q", env, line)
	}
	return s, nil
}
