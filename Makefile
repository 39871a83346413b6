# Every target loops over the workspace's modules (go.work); `go test ./...`
# does not cross module boundaries, so we ask `go list -m` for them.
SHELL := /bin/bash
MODULES := $(shell go list -m -f '{{.Dir}}')
# The code generators live in tools/ (outside go.work) so their dependency
# trees never leak into the services' modules.
TOOL := cd tools && GOWORK=off go tool
GOTESTFLAGS ?= -count=1 -timeout 20m

.PHONY: dev test test-short bench proto sqlc generate check-generated tidy fmt vet lint

dev:
	go run ./cmd/chatd dev

test:
	@set -e; for m in $(MODULES); do echo "== $$m"; (cd $$m && go test $(GOTESTFLAGS) ./...); done

test-short:
	@set -e; for m in $(MODULES); do (cd $$m && go test -short -count=1 ./...); done

bench:
	@set -e; for m in $(MODULES); do (cd $$m && go test -run '^$$' -bench . -benchmem ./...); done

vet:
	@set -e; for m in $(MODULES); do (cd $$m && go vet ./...); done

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.')

tidy:
	@set -e; for m in $(MODULES) $(CURDIR)/tools; do (cd $$m && GOWORK=off go mod tidy); done

# Regenerate protobuf code offline with the pinned local plugins.
proto:
	./scripts/buf-generate.sh

# Regenerate the typed queries from pkg/db/queries/*.sql.
sqlc:
	$(TOOL) sqlc generate -f ../pkg/db/sqlc.yaml

generate: proto sqlc

# Fails when regeneration changes a tracked file (CI runs this).
check-generated: generate
	@git add -N . >/dev/null 2>&1 || true
	@if ! git diff --quiet; then echo "generated code is stale; run 'make generate' and commit:"; git diff --stat; exit 1; fi
