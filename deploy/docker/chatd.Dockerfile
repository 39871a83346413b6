# syntax=docker/dockerfile:1
#
# chatd CLI (cmd/chatd); the Kubernetes migration Job and the compose migrate service run `chatd migrate up`.
# Build from the repository root (the go.work workspace) as the context:
#
#   docker build -f deploy/docker/chatd.Dockerfile -t chatd .
#
# Two stages: a Go builder that makes a static binary (CGO_ENABLED=0), and a
# distroless "static" image (CA certificates and tzdata, no shell) that runs
# it as the numeric non-root user 65532.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOTOOLCHAIN=local
# The whole workspace is copied: go.work names every module, and each one
# must be present for the workspace to load.
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags='-s -w' -o /out/chatd ./cmd/chatd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chatd /chatd
USER 65532:65532
ENTRYPOINT ["/chatd"]
