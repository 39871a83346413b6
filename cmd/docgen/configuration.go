package main

import (
	"bytes"
	_ "embed"
	"fmt"
	"strings"
	"text/template"
)

// configurationTemplate is the page's hand-written text around the
// generated table ({{.Settings}}).
//
//go:embed configuration.md.tmpl
var configurationTemplate string

// renderConfiguration returns docs/configuration.md: the template with the
// table of every service's declared settings.
func renderConfiguration() ([]byte, error) {
	table, err := settingsTable()
	if err != nil {
		return nil, err
	}
	tmpl, err := template.New("configuration").Parse(configurationTemplate)
	if err != nil {
		return nil, fmt.Errorf("error parsing configuration.md.tmpl: %w", err)
	}
	var out bytes.Buffer
	err = tmpl.Execute(&out, struct {
		Settings string
		Command  string
	}{table, regenerate})
	if err != nil {
		return nil, fmt.Errorf("error executing configuration.md.tmpl: %w", err)
	}
	return out.Bytes(), nil
}

// settingsRow is one setting across the services that declare it.
type settingsRow struct {
	env, flag string
	byService map[string]setting // service name → its declaration
}

// settingsTable is a Markdown table with a row per setting (in the order
// the services declare them, api first) and a column per service giving
// its default there; a service that does not read the setting shows —.
func settingsTable() (string, error) {
	progs := programs()
	var rows []*settingsRow
	index := map[string]*settingsRow{}
	for _, p := range progs {
		settings, err := declared(p)
		if err != nil {
			return "", err
		}
		for _, s := range settings {
			r, ok := index[s.Env]
			if !ok {
				r = &settingsRow{env: s.Env, flag: s.Flag, byService: map[string]setting{}}
				index[s.Env] = r
				rows = append(rows, r)
			}
			r.byService[p.Name] = s
		}
	}

	var b strings.Builder
	b.WriteString("| variable (flag) |")
	for _, p := range progs {
		fmt.Fprintf(&b, " %s |", p.Name)
	}
	b.WriteString(" meaning |\n|---|")
	for range progs {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` (`%s`) |", r.env, r.flag)
		var names []string
		for _, p := range progs {
			s, ok := r.byService[p.Name]
			if ok {
				names = append(names, p.Name)
			}
			fmt.Fprintf(&b, " %s |", defaultCell(s, ok))
		}
		fmt.Fprintf(&b, " %s |\n", meaningCell(r, names))
	}
	return b.String(), nil
}

func defaultCell(s setting, declared bool) string {
	switch {
	case !declared:
		return "—"
	case s.Secret:
		return "secret"
	case s.NoDefault:
		return "none"
	default:
		return "`" + s.Default + "`"
	}
}

// meaningCell is the setting's meaning; where services describe it
// differently, each description is prefixed with the services that use it.
func meaningCell(r *settingsRow, names []string) string {
	var texts []string
	who := map[string][]string{}
	for _, name := range names {
		u := r.byService[name].Usage
		if _, ok := who[u]; !ok {
			texts = append(texts, u)
		}
		who[u] = append(who[u], name)
	}
	if len(texts) == 1 {
		return escapeCell(texts[0])
	}
	parts := make([]string, len(texts))
	for i, u := range texts {
		parts[i] = strings.Join(who[u], ", ") + ": " + escapeCell(u)
	}
	return strings.Join(parts, " ")
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
