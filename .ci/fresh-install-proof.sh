#!/usr/bin/env bash
# Proves .ci/run on a clean Debian 12 root filesystem (docs/fresh-install.md): debootstrap bookworm
# (minbase), copy this working tree's tracked files into it, and in a chroot
#   1. .ci/run --install-only with no Rust at all: must stop with its install instructions;
#   2. KMP_CI_INSTALL_RUST=1 .ci/run --install-only: apt, Rust via rustup-init, Go from the module
#      proxy, the Python venv, Go modules, Kafka jars from Maven Central, toxiproxy, crates;
#   3. (with --suite PYTEST-ARGS) cargo build, then pytest PYTEST-ARGS under flock /tmp/kmp-kafka.lock.
# Needs root, debootstrap and network. The root filesystem is removed at the end unless --keep.
#
#   .ci/fresh-install-proof.sh [--root DIR] [--keep] [--suite 'tests/integration/test_java_client.py']
set -euo pipefail
cd "$(dirname "$0")/.."
root=/work/deb12-root
keep=0
suite=""
while (($#)); do
  case "$1" in
    --root) root=$2; shift ;;
    --keep) keep=1 ;;
    --suite) suite=$2; shift ;;
    *) echo "usage: $0 [--root DIR] [--keep] [--suite PYTEST-ARGS]" >&2; exit 2 ;;
  esac
  shift
done
((EUID == 0)) || { echo "fresh-install-proof: needs root (debootstrap, chroot, mount)" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "fresh-install-proof: apt-get install debootstrap first" >&2; exit 1; }
mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
mirror=${mirror:-http://deb.debian.org/debian}
t0=$SECONDS
say() { echo "==> [$((SECONDS - t0))s] $*"; }

unmount() { for m in dev/pts dev sys proc; do mountpoint -q "$root/$m" && umount -l "$root/$m"; done; return 0; }
finish() {
  unmount
  if ((keep)); then
    echo "fresh-install-proof: kept $root"
  elif grep -q " $root/" /proc/mounts; then
    echo "fresh-install-proof: something is still mounted under $root; not removing it" >&2
  else
    rm -rf "$root"
  fi
}
trap finish EXIT

if [[ ! -x "$root/usr/bin/apt-get" ]]; then
  say "debootstrap --variant=minbase bookworm $root $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
fi
say "clean root: $(du -shx "$root" | cut -f1); $(chroot "$root" sh -c 'for c in rustc cargo go java javac mvn python3 curl cc; do command -v $c >/dev/null && echo -n "$c "; done; echo "present of: rustc cargo go java javac mvn python3 curl cc"')"
for m in proc sys dev dev/pts; do mountpoint -q "$root/$m" || mount --bind "/$m" "$root/$m"; done
cp /etc/resolv.conf "$root/etc/resolv.conf"
# A TLS-intercepting egress proxy (this sandbox has one) signs with a CA the host trusts: give the
# chroot the same trust. On an ordinary network this copies nothing.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  say "host CA certificates copied (installed by update-ca-certificates once ca-certificates is)"
fi
rm -rf "$root/work/main"
mkdir -p "$root/work/main"
git ls-files -z | tar --null -T - -c | tar -x -C "$root/work/main"

run() {
  chroot "$root" env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/ssl/certs/ca-certificates.crt "$@"
}

say "1. .ci/run --install-only without Rust (must stop with instructions)"
if run bash /work/main/.ci/run --install-only; then echo "fresh-install-proof: .ci/run passed without Rust" >&2; exit 1; fi

say "2. KMP_CI_INSTALL_RUST=1 .ci/run --install-only"
run env KMP_CI_INSTALL_RUST=1 bash /work/main/.ci/run --install-only
say "installed: $(du -shx "$root" | cut -f1) root filesystem; $(run sh -c 'du -shx /root/.rustup /root/.cargo /root/.cache/kafka-mirror-proxy /root/.m2 /root/go /work/main/target/ci-venv /usr /var/cache/apt 2>/dev/null' | tr '\n\t' '; ')"

if [[ -n "$suite" ]]; then
  say "3. cargo build, then pytest $suite"
  run bash -c 'cd /work/main && . /root/.cargo/env && cargo build --locked --workspace'
  say "target/: $(du -sh "$root/work/main/target" | cut -f1)"
  goroot=$(ls -d "$root"/root/.cache/kafka-mirror-proxy/go-* 2>/dev/null | head -n1)
  flock /tmp/kmp-kafka.lock chroot "$root" env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH="/work/main/target/ci-venv/bin:/root/.cargo/bin:${goroot#"$root"}/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    bash -c "cd /work/main && python3 -m pytest $suite"
  say "left in the chroot's /tmp after the run: $(ls "$root/tmp" | grep -c kmp-it- || true) kmp-it-* directories"
fi
say "done"
