package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// The alert rules are well formed: every rule has an expression, a
// severity, a summary and a runbook link to a section of RUNBOOK.md that
// exists; names are unique. (That every metric they name is exported is
// cmd/e2e's TestOpsKitMetricsExist, which runs the services.)
func TestAlertRulesLinkTheRunbook(t *testing.T) {
	raw, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	anchors := runbookAnchors(t)
	seen := map[string]bool{}
	count := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			count++
			switch {
			case r.Alert == "":
				t.Errorf("group %s: a rule without an alert name", g.Name)
			case seen[r.Alert]:
				t.Errorf("alert %s is defined twice", r.Alert)
			case strings.TrimSpace(r.Expr) == "" || !strings.Contains(r.Expr, "chatd_"):
				t.Errorf("alert %s: its expression names no chatd metric: %q", r.Alert, r.Expr)
			case r.Labels["severity"] != "page" && r.Labels["severity"] != "warn":
				t.Errorf("alert %s: severity %q, want page or warn", r.Alert, r.Labels["severity"])
			case r.Annotations["summary"] == "":
				t.Errorf("alert %s has no summary", r.Alert)
			}
			seen[r.Alert] = true
			link, ok := strings.CutPrefix(r.Annotations["runbook"], "RUNBOOK.md#")
			if !ok || !anchors[link] {
				t.Errorf("alert %s: runbook %q is not a section of RUNBOOK.md", r.Alert, r.Annotations["runbook"])
			}
		}
	}
	// The list: stuck chats, lease lapses, hook failures, provider
	// errors, acquisition backlog, DB pool waits.
	for _, want := range []string{"ChatdStuckChats", "ChatdLeaseLapses", "ChatdHookFailureRate", "ChatdProviderErrorRate", "ChatdAcquisitionBacklog", "ChatdDBPoolWaits"} {
		if !seen[want] {
			t.Errorf("no alert %s", want)
		}
	}
	if count < 6 {
		t.Errorf("%d rules", count)
	}
}

// runbookAnchors are the GitHub anchors of RUNBOOK.md's headings.
func runbookAnchors(t *testing.T) map[string]bool {
	t.Helper()
	raw, err := os.ReadFile("RUNBOOK.md")
	if err != nil {
		t.Fatal(err)
	}
	punct := regexp.MustCompile(`[^a-z0-9 _-]`)
	anchors := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			anchors[strings.ReplaceAll(punct.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return anchors
}

// The dashboard is importable: JSON with a uid, a Prometheus data source
// variable, unique panel ids, and a PromQL expression naming a chatd metric
// on every target.
func TestGrafanaDashboardIsWellFormed(t *testing.T) {
	raw, err := os.ReadFile("grafana/chatd.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		UID        string `json:"uid"`
		Title      string `json:"title"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query string `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana/chatd.json: %v", err)
	}
	if d.UID == "" || d.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	if len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" || d.Templating.List[0].Query != "prometheus" {
		t.Errorf("the first variable must choose the Prometheus data source: %+v", d.Templating.List)
	}
	ids := map[int]bool{}
	graphs := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: grid position %+v does not fit 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want ${datasource}", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if !strings.Contains(q.Expr, "chatd_") {
				t.Errorf("panel %q: query %q names no chatd metric", p.Title, q.Expr)
			}
		}
	}
	if graphs < 15 {
		t.Errorf("%d panels", graphs)
	}
}
