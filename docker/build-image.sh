#!/usr/bin/env bash
# Builds the kafka-mirror-proxy container image without any registry (the CI path; users with
# Docker use docker/Dockerfile, which produces the same image): a static binary built on this
# machine, assembled on an empty (`scratch`) image with buildah, committed into a private
# containers storage and saved as an OCI archive.
#
#   docker/build-image.sh            # build (skipped when the archive is newer than every source)
#   KMP_IMAGE_REBUILD=1 docker/build-image.sh   # build even if up to date
#   KMP_IMAGE_REUSE=1 docker/build-image.sh     # keep an existing archive even if sources changed
#
# Outputs, under $CARGO_TARGET_DIR (default target/)/container/:
#   kafka-mirror-proxy.oci.tar   the image as an OCI archive (`podman load -i` / `skopeo copy`)
#   storage/, run/               the containers storage holding localhost/kafka-mirror-proxy:dev
#   image.env                    IMAGE=, STORAGE_ROOT=, RUN_ROOT=, STORAGE_DRIVER=, ARCHIVE=,
#                                IMAGE_BYTES= (what tests/integration/test_container_image.py reads)
# Needs: cargo, buildah, podman, file (Debian: apt-get install buildah podman file).
set -euo pipefail
cd "$(dirname "$0")/.."

TRIPLE=x86_64-unknown-linux-gnu
TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-target}")
OUT="$TARGET_DIR/container"
IMAGE=${KMP_IMAGE:-localhost/kafka-mirror-proxy:dev}
ARCHIVE="$OUT/kafka-mirror-proxy.oci.tar"
STORAGE=(--root "$OUT/storage" --runroot "$OUT/run" --storage-driver vfs)
BIN="$TARGET_DIR/$TRIPLE/release/kafka-mirror-proxy"

for tool in cargo buildah podman file; do
    command -v "$tool" >/dev/null || { echo "build-image.sh: $tool is missing (Debian: apt-get install buildah podman file)" >&2; exit 1; }
done
mkdir -p "$OUT"

write_env() {
    local bytes
    bytes=$(podman "${STORAGE[@]}" image inspect --format '{{.Size}}' "$IMAGE")
    cat >"$OUT/image.env" <<EOF
IMAGE=$IMAGE
STORAGE_ROOT=$OUT/storage
RUN_ROOT=$OUT/run
STORAGE_DRIVER=vfs
ARCHIVE=$ARCHIVE
IMAGE_BYTES=$bytes
EOF
    echo "image $IMAGE: $((bytes / 1024 / 1024)) MiB ($bytes bytes); archive $ARCHIVE ($(stat -c %s "$ARCHIVE") bytes)"
}

# Up to date: the archive is newer than every input (sources, manifests, this script, the rootfs).
if [[ -z "${KMP_IMAGE_REBUILD:-}" && -f "$ARCHIVE" ]] \
    && [[ -n "${KMP_IMAGE_REUSE:-}" || -z $(find Cargo.toml Cargo.lock config protocol mirror-engine proxy vendor docker/build-image.sh docker/rootfs \
                   -newer "$ARCHIVE" -type f -print -quit) ]]; then
    podman "${STORAGE[@]}" image exists "$IMAGE" || podman "${STORAGE[@]}" load -q -i "$ARCHIVE" >/dev/null
    echo "build-image.sh: $ARCHIVE is up to date"
    write_env
    exit 0
fi

# 1. A static binary (glibc, statically linked: the image has no libc), stripped.
echo "build-image.sh: building the static release binary (several minutes on 2 cores)"
started=$SECONDS
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_RELEASE_DEBUG=0 CARGO_PROFILE_RELEASE_STRIP=symbols \
    cargo build --release --locked --target "$TRIPLE" -p kafka-mirror-proxy
echo "build-image.sh: binary built in $((SECONDS - started))s"
kind=$(file -b "$BIN")
if [[ "$kind" != *"statically linked"* && "$kind" != *"static-pie linked"* ]]; then
    echo "build-image.sh: $BIN is not static: $kind" >&2
    exit 1
fi
if ldd "$BIN" >/dev/null 2>&1 && ! ldd "$BIN" 2>&1 | grep -q "statically linked"; then
    echo "build-image.sh: ldd lists shared libraries of $BIN:" >&2
    ldd "$BIN" >&2
    exit 1
fi

# 2. The image: scratch + the binary + docker/rootfs (passwd/group with the user 65532, the
#    resolver's nsswitch.conf, the default config). No shell, no libc, no CA bundle (TLS trust is
#    configured per cluster with PEM files: ssl.truststore.location).
label() { git log -1 --format="$1" 2>/dev/null || echo unknown; }
# Exposed ports as Docker records `EXPOSE 9192 9180 9200-9299`: one "port/tcp" entry each.
ports=()
for p in 9192 9180 $(seq 9200 9299); do ports+=(--port "$p/tcp"); done
ctr=$(buildah "${STORAGE[@]}" from scratch)
trap 'buildah "${STORAGE[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah "${STORAGE[@]}" copy --chown 0:0 --chmod 0755 "$ctr" "$BIN" /usr/local/bin/kafka-mirror-proxy >/dev/null
buildah "${STORAGE[@]}" copy --chown 0:0 "$ctr" docker/rootfs/ / >/dev/null
buildah "${STORAGE[@]}" config \
    --user 65532:65532 \
    --workingdir / \
    --env PATH=/usr/local/bin \
    "${ports[@]}" \
    --entrypoint '["/usr/local/bin/kafka-mirror-proxy", "run", "--config", "/etc/kafka-mirror-proxy/config.toml"]' \
    --cmd '' \
    --stop-signal SIGTERM \
    --label org.opencontainers.image.title=kafka-mirror-proxy \
    --label org.opencontainers.image.source=docker/build-image.sh \
    --label org.opencontainers.image.revision="$(label %H)" \
    --label org.opencontainers.image.licenses=Apache-2.0 \
    "$ctr"
buildah "${STORAGE[@]}" commit -q --format oci --rm "$ctr" "$IMAGE" >/dev/null
trap - EXIT
rm -f "$ARCHIVE.tmp"
podman "${STORAGE[@]}" save -q --format oci-archive -o "$ARCHIVE.tmp" "$IMAGE"
mv "$ARCHIVE.tmp" "$ARCHIVE"
write_env
