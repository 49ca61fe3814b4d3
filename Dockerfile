# syntax=docker/dockerfile:1
# Sluice in one image: build on the Rust image, run on bookworm-slim with the GStreamer runtime.
# Both stages take their Debian packages from scripts/deps.sh, the list the README commands use.

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY scripts/deps.sh scripts/deps.sh
RUN bash scripts/deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bash scripts/console.sh && cargo build --release --locked && cp target/release/sluice /usr/local/bin/sluice

FROM debian:bookworm-slim
COPY scripts/deps.sh /tmp/deps.sh
RUN bash /tmp/deps.sh runtime && rm -rf /var/lib/apt/lists/* /tmp/deps.sh
COPY --from=builder /usr/local/bin/sluice /usr/local/bin/sluice
RUN useradd --system --home-dir /var/lib/sluice --create-home --shell /usr/sbin/nologin sluice
# Set SLUICE_PUBLIC_URL to the address clients use (the default would be http://0.0.0.0:8080).
ENV SLUICE_DATA_DIR=/var/lib/sluice \
    SLUICE_HTTP_ADDR=0.0.0.0:8080 \
    SLUICE_RTMP_ADDR=0.0.0.0:1935 \
    SLUICE_RTSP_ADDR=0.0.0.0:8554 \
    SLUICE_SRT_ADDR=0.0.0.0:8890
VOLUME ["/var/lib/sluice"]
WORKDIR /var/lib/sluice
USER sluice
EXPOSE 8080 1935 8554 8890/udp
ENTRYPOINT ["sluice"]
CMD ["serve"]
