// Package apiserver is the api service's entry point: its settings
// (Config, read from CHATD_* variables and flags) and Run, which starts the
// hook dispatcher and telemetry and serves chatd.v1.ChatService over gRPC
// with its REST facade at /api/v2. The api binary (services/api) and the
// all-in-one dev stack (cmd/chatd dev) both start the service through it.
package apiserver
