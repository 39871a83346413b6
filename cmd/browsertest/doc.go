// Package browsertest drives chatd's web UI (pkg/webui) in a real headless
// Chromium against the four services, the way a user would.
package browsertest
