# chatd's developer targets. `make help` lists them.
#
# Go targets cover every module of the workspace (go.work): `go test ./...`
# does not cross module boundaries, so we ask `go list -m` for the modules
# and pass each one's directory pattern (<dir>/...) to a single go command.
SHELL := /bin/bash
.DEFAULT_GOAL := help

MODULES := $(shell go list -m -f '{{.Dir}}')
PKGS := $(addsuffix /...,$(MODULES))
GOTESTFLAGS ?= -count=1 -timeout 20m
BENCHFLAGS ?= -benchmem

# The packages with concurrent code run under the race detector in
# `make test` (the state machine, notifications, the part buffer, the hooks
# dispatcher, and every package of the worker, stream and relay); the rest
# run without it, so the suite stays well inside CI's time.
RACE_PATTERNS := ./pkg/chatstate/... ./pkg/notify/... ./pkg/partbuf/... \
	./pkg/hooks/... ./services/worker/... ./services/stream/... ./services/relay/... \
	./cmd/internal/loadgen/...
RACE_PKGS = $(shell go list $(RACE_PATTERNS))
PLAIN_PKGS = $(filter-out $(RACE_PKGS),$(shell go list $(PKGS)))

# `make stress` runs the tests that start goroutines many times on several
# GOMAXPROCS under the race detector, as a loaded CI machine would schedule
# them (STRESSFLAGS, STRESS_PKGS to narrow it).
STRESSFLAGS ?= -race -count=50 -cpu 1,2,4 -timeout 60m
STRESS_PKGS ?= $(RACE_PATTERNS)

# The code generators are pinned in tools/go.mod, a module outside go.work
# so their dependency trees never leak into the services' modules. They are
# built into bin/ (gitignored) from the Go module cache, so generation runs
# offline once the modules are downloaded.
TOOLS_BUILD := cd tools && GOWORK=off go build -o ../bin/

# Where generated code lives (and the protos, which `buf format` rewrites).
# check-generated fails when any of these differs from the commit.
GENERATED := pkg/gen pkg/db/queries proto

.PHONY: help dev install test test-short stress bench vet fmt tidy proto sqlc generate check-generated check-large-files docs

help:
	@echo 'make dev              run the all-in-one dev stack (bin/chatd dev)'
	@echo 'make install          install the chatd CLI (go install ./cmd/chatd)'
	@echo 'make test             every module'"'"'s tests (GOTESTFLAGS="$(GOTESTFLAGS)")'
	@echo 'make test-short       the same with -short'
	@echo 'make stress           the concurrent packages under -race, 50 times on 1, 2 and 4 CPUs (STRESSFLAGS, STRESS_PKGS)'
	@echo 'make bench            every benchmark (BENCHFLAGS="$(BENCHFLAGS)")'
	@echo 'make vet              go vet on every module'
	@echo 'make fmt              gofmt every hand-written Go file'
	@echo 'make tidy             go mod tidy in every module and tools/'
	@echo 'make proto            regenerate pkg/gen from proto/ (buf, offline)'
	@echo 'make sqlc             regenerate pkg/db/queries/*.go from its .sql files (sqlc, offline)'
	@echo 'make generate         proto + sqlc'
	@echo 'make check-generated  generate, then fail if generated code differs from the commit'
	@echo 'make check-large-files fail if git tracks a file over 5 MiB (the embedded web build excepted)'
	@echo 'make docs             regenerate docs/configuration.md from the declared settings (go run ./cmd/docgen)'
	@echo 'make web              npm ci, generate the TypeScript types, build the web app into pkg/webui/static'
	@echo 'make web-test         the TypeScript packages'"'"' Vitest tests'
	@echo 'make openai-sdk-deps  npm ci for the npm openai SDK'"'"'s tests (cmd/openaisdktest/node)'
	@echo 'make check-web        rebuild the web app and types, fail if they differ from the commit'

# Built, then exec'd: make passes SIGTERM and SIGINT to its child, which is
# then chatd itself (go run would die without passing them on and orphan
# the stack).
dev:
	go build -o bin/chatd ./cmd/chatd
	exec bin/chatd dev

# The CLI on PATH: go install puts it in $(go env GOPATH)/bin.
install:
	go install ./cmd/chatd
	@echo "installed $$(go env GOPATH)/bin/chatd (add $$(go env GOPATH)/bin to PATH if chatd is not found)"

test:
	go test $(GOTESTFLAGS) $(PLAIN_PKGS)
	go test -race $(GOTESTFLAGS) $(RACE_PKGS)
	$(MAKE) web-test

stress:
	go test $(STRESSFLAGS) $(STRESS_PKGS)

test-short:
	go test -short -count=1 $(PKGS)

bench:
	go test -run '^$$' -bench . $(BENCHFLAGS) $(PKGS)

vet:
	go vet $(PKGS)

# Tracked and new (not ignored) Go files, minus protoc output.
fmt:
	@git ls-files --cached --others --exclude-standard -- '*.go' ':!:*.pb.go' ':!:*.pb.gw.go' | \
		while read -r f; do [ -e "$$f" ] && echo "$$f"; done | xargs -r gofmt -l -w

tidy:
	@set -e; for m in $(MODULES) $(CURDIR)/tools; do echo "== $$m"; (cd $$m && GOWORK=off go mod tidy); done

# Regenerate protobuf code offline with the pinned local plugins (the script
# builds buf and the plugins into bin/ first).
proto:
	./scripts/buf-generate.sh

# Regenerate the typed queries from pkg/db/queries/*.sql and the schema in
# pkg/db/migrations. sqlc is built into bin/ from tools/ exactly as the proto
# script builds buf; it needs cgo (a C compiler). Earlier sqlc output is
# removed first so the files of deleted queries do not linger.
sqlc:
	$(TOOLS_BUILD) github.com/sqlc-dev/sqlc/cmd/sqlc
	@grep -l --null '^// Code generated by sqlc. DO NOT EDIT.$$' pkg/db/queries/*.go | xargs -0 rm -f
	bin/sqlc generate -f pkg/db/sqlc.yaml

generate: proto sqlc

# Fails when regeneration changes, deletes or adds a file under $(GENERATED)
# (untracked new files included). Unrelated files elsewhere in the tree are
# ignored. On a checkout with uncommitted work in those folders it reports
# that work too: CI runs it on a clean checkout.
check-generated: generate
	@status="$$(git status --porcelain --untracked-files=all -- $(GENERATED))"; \
	if [ -n "$$status" ]; then \
		echo "generated code is stale: run 'make generate' and commit the result:"; \
		echo "$$status"; \
		git --no-pager diff --stat -- $(GENERATED); \
		exit 1; \
	fi; \
	echo "generated code is up to date"

# docs/configuration.md is generated from the services' declared settings;
# cmd/docgen's test fails when the committed page is stale.
docs:
	go run ./cmd/docgen

# Fails when git tracks a file over 5 MiB: binaries and data dumps stay out
# of the repository. pkg/webui/static, the committed web build, is exempt.
check-large-files:
	./scripts/check-large-files.sh

# ---- web app and TypeScript packages (web/, an npm workspace) ----------
# The built app is committed in pkg/webui/static (embedded by the Go
# binaries, so go build and make dev need no Node) with the types generated
# from the OpenAPI document in web/packages/client/src/gen.
WEB_GENERATED := pkg/webui/static web/packages/client/src/gen

.PHONY: web web-deps web-test check-web

# make test's Go tests include the live client tests (cmd/browsertest), which need web/node_modules,
# and the npm openai SDK's tests (cmd/openaisdktest), which need their own node_modules.
test: web-deps openai-sdk-deps

# The npm openai SDK at the version cmd/openaisdktest/node/package-lock.json pins.
OPENAI_SDK_NODE := cmd/openaisdktest/node

.PHONY: openai-sdk-deps
openai-sdk-deps:
	@[ -d $(OPENAI_SDK_NODE)/node_modules ] || (cd $(OPENAI_SDK_NODE) && npm ci --no-audit --no-fund)

web-deps:
	@[ -d web/node_modules ] || (cd web && npm ci --no-audit --no-fund)

# npm ci, then generate the client's types and build the app into pkg/webui/static.
web:
	cd web && npm ci --no-audit --no-fund && npm run build

# Vitest: the client and the hook (the live tests run from cmd/browsertest).
web-test: web-deps
	cd web && npx tsc -p packages/client && npx tsc -p packages/react && npx tsc -p app && npx vitest run

# Fails when a rebuild from source changes the committed build or types.
check-web: web
	@status="$$(git status --porcelain --untracked-files=all -- $(WEB_GENERATED))"; \
	if [ -n "$$status" ]; then \
		echo "the built web app or the generated types are stale: run 'make web' and commit the result:"; \
		echo "$$status"; \
		exit 1; \
	fi; \
	echo "the built web app and generated types are up to date"
