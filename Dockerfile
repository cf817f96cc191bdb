# syntax=docker/dockerfile:1
#
# The agentmesh service images, for teams that build with Docker or BuildKit
# in their own CI. `make images` builds the same images without a container
# engine (cmd/imagebuild); cmd/imagebuild's tests hold this file to the same
# binaries, build flags, user, working directory, entrypoints, ports and labels.
# One target per service:
#
#   docker build --target vision -t agentmesh/vision:$VERSION \
#     --build-arg VERSION=$VERSION --build-arg REVISION=$(git rev-parse HEAD) \
#     --build-arg CREATED=$(date -u -d @$(git log -1 --format=%ct) +%Y-%m-%dT%H:%M:%SZ) .
#
# Every image is a static Go binary (CGO_ENABLED=0) on an empty base with
# Debian's CA certificates (the build stage's ca-certificates package),
# /etc/passwd naming the nonroot user 65532, its home and /tmp: no shell, no
# libc. The indexer's image also has poppler-utils' pdftotext and pdftoppm,
# for PDF attachments, with the libraries, loader, fontconfig files and
# fonts they need, taken from the build stage's Debian packages by
# imagebuild -tools-out (as `make images` takes them from the build
# machine's), so it is built for the build machine's architecture.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
ARG TARGETARCH
RUN --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=cache,target=/go/pkg/mod \
    CGO_ENABLED=0 GOOS=linux GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=false -ldflags "-s -w -X github.com/agentmesh/agentmesh/libs/service.Version=${VERSION}" \
      -o /out/ ./gateway ./services/modelgateway ./services/orchestrator ./services/vision ./services/indexer ./services/classifier ./services/sqlagent
# The CA bundle is the ca-certificates package's own certificates, as
# imagebuild takes them: never certificates a CI machine added locally.
# nonroot's home is kept apart, so the COPY that creates it can own it to
# 65532 (COPY gives what it copies to root unless told otherwise).
RUN mkdir -p /rootfs/etc/ssl/certs /rootfs/home /rootfs/tmp /home-nonroot \
 && dpkg-query -L ca-certificates | grep -E '^/usr/share/ca-certificates/.+\.crt$' | LC_ALL=C sort | xargs cat > /rootfs/etc/ssl/certs/ca-certificates.crt \
 && cp cmd/imagebuild/rootfs/etc/passwd cmd/imagebuild/rootfs/etc/group /rootfs/etc/ \
 && chmod 1777 /rootfs/tmp
RUN --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=cache,target=/go/pkg/mod \
    apt-get update && apt-get install -y --no-install-recommends poppler-utils \
 && go run ./cmd/imagebuild -arch $TARGETARCH -tools-out /tools indexer

FROM scratch AS base
COPY --from=build /rootfs/ /
COPY --from=build --chown=65532:65532 /home-nonroot /home/nonroot
USER 65532:65532
WORKDIR /home/nonroot
ARG VERSION=dev
ARG REVISION=
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/agentmesh/agentmesh" \
      org.opencontainers.image.licenses="NOASSERTION" \
      dev.agentmesh.image.ca-certificates="Debian ca-certificates of the golang build image, the package's certificate files"

FROM base AS gateway
COPY --from=build /out/gateway /usr/local/bin/gateway
EXPOSE 8080/tcp
LABEL org.opencontainers.image.title="gateway" \
      org.opencontainers.image.description="agentmesh REST and SSE gateway, OpenAPI and web console"
ENTRYPOINT ["/usr/local/bin/gateway"]

FROM base AS modelgateway
COPY --from=build /out/modelgateway /usr/local/bin/modelgateway
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="modelgateway" \
      org.opencontainers.image.description="agentmesh model gateway: every LLM and embedding call, routed to providers with retries and fallbacks"
ENTRYPOINT ["/usr/local/bin/modelgateway"]

FROM base AS orchestrator
COPY --from=build /out/orchestrator /usr/local/bin/orchestrator
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="orchestrator" \
      org.opencontainers.image.description="agentmesh orchestrator: the agentic chat loop and analysis jobs"
ENTRYPOINT ["/usr/local/bin/orchestrator"]

FROM base AS vision
COPY --from=build /out/vision /usr/local/bin/vision
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="vision" \
      org.opencontainers.image.description="agentmesh vision service: two-stage image analysis"
ENTRYPOINT ["/usr/local/bin/vision"]

FROM base AS indexer
COPY --from=build /tools/indexer/ /
COPY --from=build /out/indexer /usr/local/bin/indexer
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="indexer" \
      org.opencontainers.image.description="agentmesh indexer: document intake, extracts, hybrid search and the knowledge graph"
ENTRYPOINT ["/usr/local/bin/indexer"]

FROM base AS classifier
COPY --from=build /out/classifier /usr/local/bin/classifier
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="classifier" \
      org.opencontainers.image.description="agentmesh classifier: classification runs with human approvals and checkpoints"
ENTRYPOINT ["/usr/local/bin/classifier"]

FROM base AS sqlagent
COPY --from=build /out/sqlagent /usr/local/bin/sqlagent
EXPOSE 9090/tcp 9464/tcp
LABEL org.opencontainers.image.title="sqlagent" \
      org.opencontainers.image.description="agentmesh SQL agent: plain-English database jobs, confirmed before SQL runs"
ENTRYPOINT ["/usr/local/bin/sqlagent"]
