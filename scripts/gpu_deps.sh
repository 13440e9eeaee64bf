#!/usr/bin/env bash
# Downloads, on a Debian 12 machine, the .debs of the libraries ropelab builds against besides
# libtorch (HDF5, SentencePiece, spdlog/fmt, yaml-cpp, GoogleTest, CLI11, xxHash, nlohmann-json),
# for a GPU machine that has a CUDA PyTorch but no Debian packages and no network:
#
#   bash scripts/gpu_deps.sh DIR                       # here (Debian 12, network)
#   bash scripts/check_gpu.sh --deps DIR --bench       # there, with DIR copied beside the tree
#
# DIR/fallback holds libcurl and what it needs, which Debian's HDF5 links and which a GPU image
# usually has already; check_gpu.sh unpacks it only where the system lacks it.
set -euo pipefail
dir=${1:?usage: bash scripts/gpu_deps.sh DIR}
mkdir -p "$dir/fallback"
dir=$(cd "$dir" && pwd)
cd "$dir"
apt-get download libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 libhdf5-hl-cpp-100 \
  libaec0 libsz2 libaec-dev libsentencepiece-dev libsentencepiece0 libspdlog-dev libspdlog1.10 \
  libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7 libgtest-dev libcli11-dev libxxhash-dev \
  libxxhash0 nlohmann-json3-dev libzstd-dev zlib1g-dev
cd fallback
apt-get download libcurl4 libnghttp2-14 libssh2-1 librtmp1 libpsl5 libbrotli1 libldap-2.5-0 \
  libsasl2-2 libidn2-0 libunistring2 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 \
  libkeyutils1 libsasl2-modules-db libgnutls30 libnettle8 libhogweed6 libp11-kit0 libtasn1-6 \
  libffi8 libgmp10 libdb5.3
echo "gpu_deps: $(ls "$dir"/*.deb | wc -l) packages in $dir, $(ls "$dir"/fallback/*.deb | wc -l) in $dir/fallback"
