// Package relayserver is the relay service's entry point: its settings
// (Config, read from CHATD_* variables and flags) and Run, which opens the
// worker registry in Postgres and serves chatd.v1.RelayService. The relay
// binary (services/relay) and the all-in-one dev stack (cmd/chatd dev) both
// start the service through it.
package relayserver
