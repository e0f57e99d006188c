# syntax=docker/dockerfile:1
# rill-server in two stages: a Rust image builds the release binary, a slim Debian image
# runs it as an unprivileged user with its data in the /data volume. docs/operations.md
# explains the run flags (io_uring needs a seccomp profile that allows it).

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin rill-server \
    && strip target/release/rill-server

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin rill \
    && mkdir -p /data && chown rill:rill /data
COPY --from=build /src/target/release/rill-server /usr/local/bin/rill-server
USER rill
WORKDIR /data
VOLUME /data
# Every listener on all interfaces inside the container; threads are not pinned, since the
# container's CPU placement is managed outside it.
ENV IGGY_SYSTEM_PATH=/data \
    IGGY_TCP_ADDRESS=0.0.0.0:8090 \
    IGGY_QUIC_ADDRESS=0.0.0.0:8080 \
    IGGY_HTTP_ADDRESS=0.0.0.0:3000 \
    IGGY_WEBSOCKET_ADDRESS=0.0.0.0:8092 \
    IGGY_SYSTEM_SHARDING_PIN_THREADS=false
EXPOSE 8090/tcp 8080/udp 3000/tcp 8092/tcp
# SIGTERM: every shard flushes and fsyncs before the process exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/rill-server"]
