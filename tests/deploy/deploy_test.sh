#!/usr/bin/env bash
# Offline validation of the deployment files, run by ctest (test "deploy_test"):
#  - the Dockerfiles install the same packages as scripts/setup.sh;
#  - deploy/compose/docker-compose.yml passes `docker-compose config -q`, and so does it with
#    docker-compose.gpu.yml over it, whose workers (and only they) are on the GPUs;
#  - both Kubernetes overlays render with `kubectl kustomize` and pass check_manifests.mjs
#    (kubernetes-models schema, unknown fields, cross-object rules; flags of the real binaries);
#  - every broken fixture in fixtures/ fails, with the message its "# expect:" line names.
# Needs docker-compose (Debian), kubectl, node and npm; installs the npm packages it pins.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
source "$HERE/check_lib.sh"

for tool in docker-compose kubectl node npm python3; do
  command -v "$tool" >/dev/null || { echo "deploy_test: $tool is missing (scripts/setup.sh with INSTALL_TEST_PACKAGES=1 installs docker-compose; kubectl, node and npm come with the machine)" >&2; exit 1; }
done

# expect_ok NAME CMD...: the command must succeed.
expect_ok() {
  local name="$1"; shift
  if out="$("$@" 2>&1)"; then pass "$name"; else fail "$name"; echo "$out" | sed 's/^/      /'; fi
}
# expect_fail NAME SUBSTRING CMD...: the command must fail and say SUBSTRING.
expect_fail() {
  local name="$1" want="$2"; shift 2
  if out="$("$@" 2>&1)"; then
    fail "$name (accepted a broken file)"
  elif [[ "$out" != *"$want"* ]]; then
    fail "$name (failed without saying '$want')"; echo "$out" | sed 's/^/      /'
  else
    pass "$name: $(echo "$out" | grep -F -- "$want" | head -1 | cut -c1-120)"
  fi
}
expected() { sed -n 's/^# expect: //p' "$1" | head -1; }

# The checker's npm packages, installed once per build folder from the committed lock file.
CHECKS="${PS_DEPLOY_CHECKS_DIR:-$BIN/../deploy-checks}"
mkdir -p "$CHECKS"
cp "$HERE/package.json" "$HERE/package-lock.json" "$HERE/check_manifests.mjs" "$CHECKS/"
if ! cmp -s "$HERE/package-lock.json" "$CHECKS/node_modules/.installed-lock" 2>/dev/null; then
  (cd "$CHECKS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  cp "$HERE/package-lock.json" "$CHECKS/node_modules/.installed-lock"
fi

# The binaries' flags, from their --help.
python3 - "$BIN" > "$WORK/flags.json" <<'PY'
import json, re, subprocess, sys
flags = {}
for b in ("ps_server", "ps_worker"):
    out = subprocess.run([f"{sys.argv[1]}/{b}", "--help"], capture_output=True, text=True).stdout
    flags[b] = sorted(set(re.findall(r"^\s+--([a-z0-9_]+) \(", out, re.M)))
    if len(flags[b]) < 10:
        sys.exit(f"could not read the flags of {b}")
print(json.dumps(flags))
PY

# --- Dockerfiles
expect_ok "Dockerfile packages = scripts/setup.sh" \
  python3 "$HERE/check_packages.py" "$ROOT/scripts/setup.sh" "$ROOT/deploy/docker/Dockerfile"
expect_ok "Dockerfile.cuda packages = scripts/setup.sh (+ NVIDIA repository tools)" \
  python3 "$HERE/check_packages.py" "$ROOT/scripts/setup.sh" "$ROOT/deploy/docker/Dockerfile.cuda" \
  ca-certificates,wget
f="$HERE/fixtures/Dockerfile.missing-package"
expect_fail "fixture Dockerfile.missing-package" "libcpp-httplib-dev" \
  python3 "$HERE/check_packages.py" "$ROOT/scripts/setup.sh" "$f"

# --- docker-compose
expect_ok "docker-compose config" docker-compose -f "$ROOT/deploy/compose/docker-compose.yml" config -q
expect_ok "docker-compose.python.yml config" \
  docker-compose -f "$ROOT/deploy/compose/docker-compose.python.yml" config -q
for f in "$HERE"/fixtures/compose/*.yml; do
  expect_fail "fixture compose/$(basename "$f")" "$(expected "$f")" docker-compose -f "$f" config -q
done
# The GPU override: merged over the cluster, every worker (and nothing else) is on the CUDA
# image, asks for the host's GPUs and binds one by its rank.
docker-compose -f "$ROOT/deploy/compose/docker-compose.yml" \
  -f "$ROOT/deploy/compose/docker-compose.gpu.yml" config > "$WORK/compose-gpu.yml"
check_gpu_override() {
  /usr/bin/python3 - "$WORK/compose-gpu.yml" <<'PY'
import sys, yaml
services = yaml.safe_load(open(sys.argv[1]))["services"]
workers = [n for n in services if n.startswith("worker-")]
problems = [] if len(workers) == 4 else [f"{len(workers)} workers"]
for name, svc in services.items():
    gpu = name in workers
    want_image = "ps-train:cuda" if gpu else "ps-train:cpu"
    if svc.get("image") != want_image:
        problems.append(f"{name}: image {svc.get('image')}, not {want_image}")
    env = svc.get("environment", {})
    if gpu and (env.get("PS_DEVICE") != "cuda" or "PS_RANK" not in env):
        problems.append(f"{name}: PS_DEVICE {env.get('PS_DEVICE')}, PS_RANK {env.get('PS_RANK')}")
    devices = svc.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
    if gpu != any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devices):
        problems.append(f"{name}: GPU request {devices}")
print("\n".join(problems))
sys.exit(1 if problems else 0)
PY
}
expect_ok "docker-compose.gpu.yml: the workers, and only they, on the GPUs" check_gpu_override

# --- One configuration: the clusters train with scripts/run.sh's hyper-parameters.
PY3=/usr/bin/python3  # Debian's, with python3-yaml
[[ -x "$PY3" ]] || PY3=python3
expect_ok "compose trains as scripts/run.sh does" \
  "$PY3" "$HERE/check_effective_config.py" "$BIN" "$ROOT/scripts/run.sh" \
  --compose "$ROOT/deploy/compose/docker-compose.yml"
expect_ok "compose with docker-compose.gpu.yml trains as scripts/run.sh does" \
  "$PY3" "$HERE/check_effective_config.py" "$BIN" "$ROOT/scripts/run.sh" \
  --compose "$WORK/compose-gpu.yml"
f="$HERE/fixtures/effective/compose-lr.yml"
expect_fail "fixture effective/compose-lr.yml" "$(expected "$f")" \
  "$PY3" "$HERE/check_effective_config.py" "$BIN" "$ROOT/scripts/run.sh" --compose "$f"

# --- Kubernetes: a copy of the tree with test certificates where the secretGenerator wants them.
mkdir -p "$WORK/tree"
cp -r "$ROOT/deploy/k8s" "$WORK/tree/k8s"
cp -r "$HERE/fixtures/k8s" "$WORK/tree/fixtures"
SERVER_NAMES=ps-0.ps,ps-1.ps "$ROOT/scripts/make_test_certs.sh" "$WORK/tree/k8s/base/secrets" >/dev/null
render_and_check() {  # DIR: render with kubectl kustomize, then check the objects
  kubectl kustomize "$1" > "$WORK/rendered.yaml" && node "$CHECKS/check_manifests.mjs" "$WORK/rendered.yaml" "$WORK/flags.json"
}
for overlay in cpu gpu; do
  expect_ok "kustomize overlays/$overlay + schema + cross-object checks" render_and_check "$WORK/tree/k8s/overlays/$overlay"
  expect_ok "overlays/$overlay trains as scripts/run.sh does" \
    "$PY3" "$HERE/check_effective_config.py" "$BIN" "$ROOT/scripts/run.sh" --k8s "$WORK/rendered.yaml"
done
expect_ok "kustomize overlays/python + schema + cross-object checks" \
  render_and_check "$WORK/tree/k8s/overlays/python"
if kubectl kustomize "$WORK/tree/k8s/overlays/python" |
  grep -A3 -- '- /usr/bin/python3' | grep -q /opt/ps/examples/fashion_mnist_mlp.py; then
  pass "overlays/python runs the example under python3"
else
  fail "overlays/python runs the example under python3"
fi
if kubectl kustomize "$WORK/tree/k8s/overlays/python" |
  grep -A1 -- '- name: OPENBLAS_NUM_THREADS' | grep -q 'value: "1"'; then
  pass "overlays/python gives OpenBLAS one thread, the pod's CPU request"
else
  fail "overlays/python gives OpenBLAS one thread, the pod's CPU request"
fi
if kubectl kustomize "$WORK/tree/k8s/overlays/gpu" | grep -q 'nvidia.com/gpu: 1'; then
  pass "overlays/gpu asks for nvidia.com/gpu"
else
  fail "overlays/gpu asks for nvidia.com/gpu"
fi
for d in "$WORK"/tree/fixtures/*/; do
  expect_fail "fixture k8s/$(basename "$d")" "$(expected "$d/kustomization.yaml")" render_and_check "$d"
done

finish deploy_test
echo "deploy_test: all checks passed"
