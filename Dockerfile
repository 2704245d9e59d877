# syntax=docker/dockerfile:1
# Build stage: compile the one `cronq` binary in release mode.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
RUN apt-get update && apt-get install -y --no-install-recommends gcc g++ make pkg-config && rm -rf /var/lib/apt/lists/*
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin cronq && cp target/release/cronq /cronq

# Runtime stage: the binary only, as a non-root user.
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates tzdata && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin cronq
COPY --from=build /cronq /usr/local/bin/cronq
USER cronq
ENTRYPOINT ["/usr/local/bin/cronq"]
CMD ["--help"]
