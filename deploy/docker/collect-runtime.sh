#!/usr/bin/env bash
# Used by the Dockerfiles' build stage: copies the project's binaries and every shared library
# they load (except those the runtime base image already has) into OUT, so the runtime stage is
# just `COPY --from=build OUT /`.
#   collect-runtime.sh BIN_DIR OUT [EXCLUDE_REGEX]
#
# Contract: OUT holds only real folders that are real folders on a merged-/usr base image too.
# Debian 12 and Ubuntu 24.04 images have /lib, /lib64, /bin and /sbin as links into /usr; a real
# OUT/lib would replace the link (classic builder: the image loses its dynamic loader and nothing
# runs) or be refused (BuildKit: "cannot copy to non-directory"). So each library is copied into
# the canonical folder it lives in (`readlink -f` of the folder ldd names: /lib/x86_64-linux-gnu
# -> /usr/lib/x86_64-linux-gnu), which is the same place on split-/usr and merged-/usr systems.
set -euo pipefail
BIN_DIR="$1"
OUT="$2"
# glibc's own libraries come with every base image; CUDA's come with the CUDA runtime image.
EXCLUDE="${3:-^/(usr/)?lib(64)?/(x86_64-linux-gnu/)?(ld-linux|libc|libm|libdl|libpthread|librt|libresolv)[.-]}"
BINARIES=(ps_server ps_worker ps_ctl ps_launch)
mkdir -p "$OUT/usr/local/bin"
for b in "${BINARIES[@]}"; do
  install -m 0755 "$BIN_DIR/$b" "$OUT/usr/local/bin/$b"
done
for b in "${BINARIES[@]}"; do ldd "$BIN_DIR/$b"; done |
  awk '/=> \// { print $3 }' | sort -u | grep -Ev "$EXCLUDE" |
  while read -r lib; do
    dir="$(readlink -f "$(dirname "$lib")")"
    mkdir -p "$OUT$dir"
    cp -L "$lib" "$OUT$dir/$(basename "$lib")"  # -L: the file behind alternatives and versions
  done
for top in lib lib32 lib64 libx32 bin sbin; do
  if [[ -e "$OUT/$top" ]]; then
    echo "collect-runtime: $OUT/$top would replace the base image's /$top link" >&2
    exit 1
  fi
done
echo "collect-runtime: $(find "$OUT" -type f | wc -l) files in $OUT"
