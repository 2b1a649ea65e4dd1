# The kerf image: `kerf` built as a static musl binary with the EC2 provider (`--features aws`:
# the image is for clusters, `kerf controller --cloud aws`), run as a non-root user on a
# distroless base (CA certificates, /etc/passwd with user 65532, nothing else).
#
#   docker build -t REGISTRY/kerf:TAG .
#
# Builds for the machine's own architecture (x86_64 or aarch64); for another one, build under
# `docker buildx build --platform linux/arm64` (or amd64).

FROM rust:1.95-bookworm AS build
# musl-gcc: the C compiler for the musl target (aws-lc-rs, the TLS stack's crypto, is C). It
# sees only musl's headers; aws-lc also reads the kernel's (linux/random.h), so those are
# linked into musl's include directory.
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools linux-libc-dev \
    && rm -rf /var/lib/apt/lists/* \
    && musl_include="/usr/include/$(uname -m)-linux-musl" \
    && ln -s /usr/include/linux "$musl_include/linux" \
    && ln -s /usr/include/asm-generic "$musl_include/asm-generic" \
    && ln -s "/usr/include/$(uname -m)-linux-gnu/asm" "$musl_include/asm"
RUN rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p kerf --features aws --target "$(uname -m)-unknown-linux-musl" \
    && cp "/src/target/$(uname -m)-unknown-linux-musl/release/kerf" /kerf \
    && /kerf --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /kerf /kerf
USER 65532:65532
ENTRYPOINT ["/kerf"]
CMD ["controller"]
