#!/usr/bin/env bash
# Builds the test control plane (etcd 3.4 and Kubernetes v1.20.2 kube-apiserver and
# kube-controller-manager) from Debian bookworm's packages into OUT_DIR, as
# ../shared/testenv/README.md describes. Needs root (or sudo) for apt; ~10 minutes on 2 cores.
set -euo pipefail
out=${1:?usage: build-testenv.sh OUT_DIR}
mkdir -p "$out"
sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
start=$SECONDS
# Progress goes to stderr; stdout carries only the folder, printed last.
step() { echo "build-testenv [$(( (SECONDS - start) / 60 )) min]: $*" >&2; }

# The deb-src line uses the same Debian mirror as the existing deb lines.
mirror=$(grep -hoE 'https?://[^ ]+/debian/?$' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
if ! grep -qs '^Types: deb-src' /etc/apt/sources.list.d/berth-debian-src.sources; then
  $sudo tee /etc/apt/sources.list.d/berth-debian-src.sources >/dev/null <<SRC
Types: deb-src
URIs: $mirror
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
step "1/4 apt-get install golang-go rsync etcd-server make (needs root once)"
$sudo apt-get update -qq
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
  golang-go rsync etcd-server make golang-github-modern-go-reflect2-dev >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
step "2/4 apt-get source kubernetes (~34 MB)"
# As root, apt would warn that it cannot drop to its sandbox user in a mktemp folder.
sandbox=(); [ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
apt-get "${sandbox[@]}" source --download-only kubernetes >/dev/null
tar xzf kubernetes_*.orig.tar.gz
cd kubernetes-*/
mkdir -p .go/src/k8s.io && ln -sfn ../../.. .go/src/k8s.io/kubernetes
# Kubernetes 1.20 vendors reflect2 1.0.1, whose map iteration faults under Go >= 1.18:
# the apiserver dies ("fatal error: fault" in mapiterinit) the first time it encodes a
# custom resource. reflect2 1.0.2, from Debian, is the upstream fix.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
step "3/4 make kube-apiserver kube-controller-manager (about 7 minutes on 2 cores)"
GOPATH=$PWD/.go CGO_ENABLED=0 HOME=$(mktemp -d) \
  make WHAT="cmd/kube-apiserver cmd/kube-controller-manager" >/dev/null
step "4/4 installing into $out"
install -m 0755 _output/bin/kube-apiserver _output/bin/kube-controller-manager "$out/"
install -m 0755 /usr/bin/etcd "$out/etcd"
echo "$out"
