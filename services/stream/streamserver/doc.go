// Package streamserver is the stream service's entry point: its settings
// (Config, read from CHATD_* variables and flags) and Run, which wires the
// Postgres pool, NATS, the sync poller, the relay forwarder and the shared
// live-part hub into the HTTP handler of GET /api/v2/chats/{chat}/stream.
// The stream binary (services/stream) and the all-in-one dev stack
// (cmd/chatd dev) both start the service through it.
package streamserver
