# Builds the Turnstile manager into a distroless, non-root image.
#   docker build -t <registry>/turnstile:<tag> .
# Multi-arch (BuildKit): docker buildx build --platform linux/amd64,linux/arm64 ...
# Works with both BuildKit and the legacy builder (no RUN --mount).
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace

# Dependencies first, in their own cached layer: it is rebuilt only when go.mod or go.sum
# change, not on every source edit.
COPY go.mod go.sum ./
RUN go mod download

# The sources the manager is built from (see .dockerignore for what stays out).
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/
COPY pkg/ pkg/

# Static binary: CGO off, no build paths, no symbol tables. GOARCH follows the target platform
# when built with buildx; otherwise the builder's own.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /workspace/manager ./cmd/manager

# distroless/static: no shell, no package manager; CA certificates and tzdata only.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/manager /manager
USER 65532:65532

ENTRYPOINT ["/manager"]
