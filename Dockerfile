# syntax=docker/dockerfile:1
# kok: multi-stage build. The builder compiles a release binary from the locked dependency set; the
# runtime is Debian slim with only what kok needs at run time, running as a non-root user.
#
#   docker build -t kok .
#   docker run --rm kok --help

FROM rust:1-bookworm AS builder
WORKDIR /src
# libgit2 (vendored by git2) builds against OpenSSL and libssh2 for https and ssh remotes.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake pkg-config libssl-dev libssh2-1-dev \
    && rm -rf /var/lib/apt/lists/*
COPY . .
# The commit `kok_build_info` reports: docker build --build-arg KOK_BUILD_COMMIT=$(git rev-parse --short=12 HEAD)
ARG KOK_BUILD_COMMIT=unknown
ENV KOK_BUILD_COMMIT=$KOK_BUILD_COMMIT
RUN cargo build --release --locked --bin kok \
    && install -m 0755 target/release/kok /usr/local/bin/kok

FROM debian:bookworm-slim
# ca-certificates: TLS to git remotes, forges and the API server; libssl3 and libssh2-1: what the
# git2 (libgit2) build links for https and ssh remotes. The git CLI is not needed.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 libssh2-1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 kok \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin kok \
    && install -d -o 65532 -g 65532 /var/cache/kok
COPY --from=builder /usr/local/bin/kok /usr/local/bin/kok
USER 65532:65532
ENV HOME=/tmp KOK_CACHE_DIR=/var/cache/kok KOK_LISTEN=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/kok"]
CMD ["run"]
