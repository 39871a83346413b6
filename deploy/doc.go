// Package deploy holds chatd's deployment files and the tests that check them:
// the Dockerfiles (docker/), the Kustomize base and overlays (kustomize/) and
// the compose file (compose.yaml). manifests_test.go renders the Kustomize
// base with the kustomize library and checks the kinds, probes, ports, grace
// periods and security settings against the services' sources.
package deploy
