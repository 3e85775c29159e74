#!/usr/bin/env bash
# deploy/docker/collect-runtime.sh's output must overlay a merged-/usr base image (Debian 12,
# Ubuntu 24.04) without replacing its /lib, /lib64, /bin or /sbin links, and must hold every
# library the binaries load (but glibc's) at its canonical path. Run by ctest
# ("collect_runtime_test"); needs the built binaries.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/check_lib.sh"
OUT="$WORK"

bash "$ROOT/deploy/docker/collect-runtime.sh" "$BIN" "$OUT/root" >/dev/null

for top in lib lib32 lib64 libx32 bin sbin; do
  [[ -e "$OUT/root/$top" ]] && fail "the output has a real /$top: it would replace the image's link"
done
glibc='^(ld-linux|libc|libm|libdl|libpthread|librt|libresolv)[.-]'
checked=0
for b in ps_server ps_worker ps_ctl ps_launch; do
  [[ -x "$OUT/root/usr/local/bin/$b" ]] || fail "$b is not in /usr/local/bin"
  while read -r lib; do
    name="$(basename "$lib")"
    [[ "$name" =~ $glibc ]] && continue
    canonical="$(readlink -f "$(dirname "$lib")")/$name"
    if [[ ! -f "$OUT/root$canonical" ]]; then
      fail "$b loads $lib, missing at $canonical"
    elif ! cmp -s "$lib" "$OUT/root$canonical"; then
      fail "$canonical differs from the library $b loads"
    fi
    checked=$((checked + 1))
  done < <(ldd "$BIN/$b" | awk '/=> \// { print $3 }')
done
(( checked > 10 )) || fail "only $checked libraries checked: ldd output not understood"
# A broken output is refused by the script itself, not copied into an image.
mkdir -p "$OUT/bad/lib/x86_64-linux-gnu"
if bash "$ROOT/deploy/docker/collect-runtime.sh" "$BIN" "$OUT/bad" >/dev/null 2>"$OUT/err"; then
  fail "collect-runtime.sh accepted an output with a real /lib"
elif ! grep -q "would replace the base image's /lib link" "$OUT/err"; then
  fail "collect-runtime.sh refused a real /lib without saying why: $(cat "$OUT/err")"
fi
finish collect_runtime_test
echo "collect_runtime_test: $checked library loads checked, no top-level link replaced"
