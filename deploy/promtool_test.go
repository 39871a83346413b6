package deploy

import (
	"os/exec"
	"testing"
)

// Prometheus loads the rules we ship: promtool checks alerts.yaml and runs
// its unit tests (prometheus/alerts_test.yaml: for each alert, synthetic
// series that fire it and series that do not). promtool comes with
// Debian's prometheus package, which .ci/run installs.
func TestAlertRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool is needed to load the alert rules (apt-get install prometheus): %v", err)
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yaml"},
		{"test", "rules", "alerts_test.yaml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
