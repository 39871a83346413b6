// Package workerserver is the worker service's entry point: its settings
// (Config, read from CHATD_* variables and flags) and Run, which builds the
// state machine, the message part buffer, the tool providers, the runner
// manager and the acquisition loop, serves chatd.v1.PartsService, and
// drains on shutdown. The worker binary (services/worker) and the
// all-in-one dev stack (cmd/chatd dev) both start the service through it.
package workerserver
