#!/usr/bin/env bash
# Used by the Dockerfiles' build stage: copies the project's binaries and every shared library
# they load (except those the runtime base image already has) into OUT, keeping their paths, so
# the runtime stage is just `COPY --from=build OUT /`.
#   collect-runtime.sh BIN_DIR OUT [EXCLUDE_REGEX]
set -euo pipefail
BIN_DIR="$1"
OUT="$2"
# glibc's own libraries come with every base image; CUDA's come with the CUDA runtime image.
EXCLUDE="${3:-^/(usr/)?lib(64)?/(x86_64-linux-gnu/)?(ld-linux|libc|libm|libdl|libpthread|librt|libresolv)[.-]}"
mkdir -p "$OUT/usr/local/bin"
for b in ps_server ps_worker ps_ctl ps_launch; do
  install -m 0755 "$BIN_DIR/$b" "$OUT/usr/local/bin/$b"
done
ldd "$BIN_DIR"/ps_server "$BIN_DIR"/ps_worker "$BIN_DIR"/ps_ctl "$BIN_DIR"/ps_launch |
  awk '/=> \// { print $3 }' | sort -u | grep -Ev "$EXCLUDE" |
  while read -r lib; do
    mkdir -p "$OUT$(dirname "$lib")"
    cp -L "$lib" "$OUT$lib"   # -L: the file behind alternatives and version symlinks
  done
echo "collect-runtime: $(find "$OUT" -type f | wc -l) files in $OUT"
