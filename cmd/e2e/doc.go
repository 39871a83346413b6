// Package e2e holds end-to-end tests that run chatd's four services as
// separate processes, the way production runs them.
package e2e
