# syntax=docker/dockerfile:1
#
# chatd api: gRPC ChatService on 7001 (CHATD_GRPC_ADDR), REST facade and /healthz on 8080 (CHATD_HTTP_ADDR).
# Build from the repository root (the go.work workspace) as the context:
#
#   docker build -f deploy/docker/api.Dockerfile -t chatd-api .
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
    go build -trimpath -ldflags='-s -w' -o /out/chatd-api ./services/api

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chatd-api /chatd-api
USER 65532:65532
EXPOSE 7001 8080
ENTRYPOINT ["/chatd-api"]
