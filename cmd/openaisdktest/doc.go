// Package openaisdktest runs the official OpenAI SDKs against chatd's
// OpenAI-compatible surface (/v1): the npm openai package's tests (node/,
// pinned by its package-lock.json and installed by `make
// openai-sdk-deps`) against the api, a worker and the relay in the test
// process, and the Go SDK against the four services as separate processes
// with a worker killed in the middle of a response.
package openaisdktest
