# Builds the operator image: docker build -t ghcr.io/retryops/retry-operator:dev .
# (The dispatcher image is built from the same file with --build-arg CMD=dispatcher.)
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG CMD=manager
WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/app ./cmd/${CMD}

FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /out/app /app
USER 65532:65532
ENTRYPOINT ["/app"]
