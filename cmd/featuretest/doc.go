// Package featuretest holds end-to-end tests of agent features (compaction,
// clear, ...) through the api's REST facade and a worker driving the
// scripted model, both running in the test process over a fresh database
// and an in-process NATS server.
package featuretest
