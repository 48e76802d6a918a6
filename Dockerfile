# Builds the operator image: docker build -t ghcr.io/retryops/retry-operator:dev .
# (The dispatcher image is built from the same file with --build-arg CMD=dispatcher.)
# Base images are pinned by digest (multi-arch index digests); the tag is for the reader. To move on:
#   docker buildx imagetools inspect golang:1.26.5   (and gcr.io/distroless/static:nonroot)
FROM golang:1.26.5@sha256:3aff6657219a4d9c14e27fb1d8976c49c29fddb70ba835014f477e1c70636647 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG CMD=manager
WORKDIR /workspace
# The data plane is a module of its own (sdk/), which go.mod replaces with ./sdk: its go.mod comes
# before the download, its code with the rest.
COPY go.mod go.sum ./
COPY sdk/go.mod sdk/go.sum sdk/
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/
COPY pkg/ pkg/
COPY sdk/ sdk/
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -ldflags="-s -w" -o /out/app ./cmd/${CMD}

FROM gcr.io/distroless/static:nonroot@sha256:e2e927ec666bae08560abb3c55d0659eceabb657f56b6782ab500a9fc7f555e3
WORKDIR /
COPY --from=builder /out/app /app
USER 65532:65532
ENTRYPOINT ["/app"]
