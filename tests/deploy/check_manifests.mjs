// Offline checks of rendered Kubernetes manifests (the output of `kubectl kustomize`):
//  1. schema: every object against the Kubernetes OpenAPI schema (npm kubernetes-models 4.x);
//  2. unknown fields: a field the schema does not define (kubernetes-models alone accepts them);
//  3. cross-object rules of this project: the StatefulSet's Service is headless and selects its
//     pods, probe and scrape ports are declared container ports, every PS_* variable is a flag of
//     the container's binary, shard and worker counts agree across ConfigMap, StatefulSet,
//     PS_SERVERS and the Job, referenced ConfigMaps and Secrets exist.
// Usage: node check_manifests.mjs RENDERED.yaml FLAGS.json
//   FLAGS.json: {"ps_server": ["port", ...], "ps_worker": [...]} (the binaries' flags).
// Prints one line per problem, naming the object; exit code 1 when there is any.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const [renderedPath, flagsPath] = process.argv.slice(2);
const docs = parseAllDocuments(readFileSync(renderedPath, "utf8"))
  .map((d) => d.toJS())
  .filter((d) => d);
// kustomize wraps long base64 values over lines; the API server's decoder ignores the newlines.
for (const d of docs) {
  if (d.kind !== "Secret") continue;
  for (const k of Object.keys(d.data ?? {})) d.data[k] = String(d.data[k]).replace(/\s+/g, "");
}
const flags = JSON.parse(readFileSync(flagsPath, "utf8"));
const problems = [];
const name = (o) => `${o.kind}/${o.metadata?.name ?? "?"}`;

// --- 1 and 2: schema and unknown fields -------------------------------------------------
async function modelOf(obj) {
  const [group, version] = obj.apiVersion.includes("/")
    ? obj.apiVersion.split("/")
    : [null, obj.apiVersion];
  const path = group ? `kubernetes-models/${group}/${version}/${obj.kind}` : `kubernetes-models/${version}/${obj.kind}`;
  try {
    const mod = await import(path);
    return mod[obj.kind];
  } catch {
    return null;
  }
}

function validationErrors(Model, obj) {
  try {
    new Model(obj).validate();
    return [];
  } catch (e) {
    return e.errors ?? [{ instancePath: "", message: String(e.message) }];
  }
}

const pointer = (path) => path.map((p) => "/" + String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("");

// A key is defined by the schema when a value of an impossible type (a function) placed there
// makes the validator complain at exactly that path.
function unknownFields(Model, root) {
  const found = [];
  const visit = (node, path) => {
    if (Array.isArray(node)) {
      node.forEach((child, i) => visit(child, [...path, i]));
      return;
    }
    if (node === null || typeof node !== "object") return;
    for (const key of Object.keys(node)) {
      const probe = structuredClone(root);
      let at = probe;
      for (const p of path) at = at[p];
      at[key] = () => 0;
      const where = pointer([...path, key]);
      const known = validationErrors(Model, probe).some((e) => e.instancePath === where);
      if (!known) {
        found.push(where);
      } else {
        visit(node[key], [...path, key]);
      }
    }
  };
  visit(root, []);
  return found;
}

for (const obj of docs) {
  const Model = await modelOf(obj);
  if (!Model) {
    problems.push(`${name(obj)}: unknown apiVersion/kind ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  for (const e of validationErrors(Model, obj)) {
    problems.push(`${name(obj)}: schema: ${e.instancePath || "/"} ${e.message}`);
  }
  for (const where of unknownFields(Model, obj)) {
    problems.push(`${name(obj)}: unknown field ${where}`);
  }
}

// --- 3: cross-object rules -----------------------------------------------------------------
const byKind = (kind) => docs.filter((d) => d.kind === kind);
const find = (kind, n) => docs.find((d) => d.kind === kind && d.metadata?.name === n);
const selects = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
const podSpecs = [
  ...byKind("StatefulSet").map((o) => [o, o.spec.template]),
  ...byKind("Job").map((o) => [o, o.spec.template]),
  ...byKind("Deployment").map((o) => [o, o.spec.template]),
];

for (const sts of byKind("StatefulSet")) {
  const svc = find("Service", sts.spec.serviceName);
  if (!svc) {
    problems.push(`${name(sts)}: serviceName ${sts.spec.serviceName} names no Service`);
    continue;
  }
  if (svc.spec.clusterIP !== "None") {
    problems.push(`${name(svc)}: the Service of ${name(sts)} must be headless (clusterIP: None)`);
  }
  if (!selects(svc.spec.selector, sts.spec.template.metadata?.labels)) {
    problems.push(`${name(svc)}: its selector does not select the pods of ${name(sts)}`);
  }
  if (!svc.spec.publishNotReadyAddresses) {
    problems.push(
      `${name(svc)}: publishNotReadyAddresses must be true (shards are ready only after workers reach them)`,
    );
  }
}

const binaryOf = (c) => (c.command?.[0] ?? "").split("/").pop();
// A Python worker (python3 SCRIPT, docs/python.md) reads these PS_* variables: ps_train.torch's
// init() and finish() (worker/python/ps_train/torch.py), and the example's defaults
// (examples/fashion_mnist_mlp.py: epochs, batch size, seed).
flags.python3 = ["servers", "rank", "num_workers", "tls_ca", "tls_cert", "tls_key",
                 "tls_server_name", "token_file", "allow_plaintext_token", "shared_memory",
                 "retry_s", "require_all_work", "epochs", "batch_size", "seed"];
const containerPorts = (c) =>
  new Set((c.ports ?? []).flatMap((p) => [p.containerPort, p.name].filter((x) => x !== undefined)));
const configMapUsers = new Map();  // ConfigMap name -> binaries reading it

for (const [owner, template] of podSpecs) {
  const spec = template.spec;
  for (const c of spec.containers ?? []) {
    const ports = containerPorts(c);
    const who = `${name(owner)} container ${c.name}`;
    for (const kind of ["startupProbe", "livenessProbe", "readinessProbe"]) {
      const probe = c[kind];
      if (!probe) continue;
      const port = probe.grpc?.port ?? probe.httpGet?.port ?? probe.tcpSocket?.port;
      if (port !== undefined && !ports.has(port)) {
        problems.push(`${who}: ${kind} port ${port} is not a declared container port`);
      }
    }
    const scrape = template.metadata?.annotations?.["prometheus.io/port"];
    if (scrape !== undefined && !ports.has(Number(scrape))) {
      problems.push(`${who}: prometheus.io/port ${scrape} is not a declared container port`);
    }
    const binary = binaryOf(c);
    const known = flags[binary];
    if (!known) {
      problems.push(`${who}: command ${c.command?.[0]} is not one of ${Object.keys(flags).join(", ")}`);
      continue;
    }
    for (const e of c.env ?? []) {
      if (!e.name.startsWith("PS_")) continue;
      const flag = e.name.slice(3).toLowerCase();
      if (!known.includes(flag)) problems.push(`${who}: ${e.name} is not a flag of ${binary} (--${flag})`);
    }
    for (const from of c.envFrom ?? []) {
      const ref = from.configMapRef?.name;
      if (!ref) continue;
      if (!find("ConfigMap", ref)) problems.push(`${who}: envFrom ConfigMap ${ref} does not exist`);
      configMapUsers.set(ref, [...(configMapUsers.get(ref) ?? []), binary]);
    }
  }
  for (const v of spec.volumes ?? []) {
    if (v.secret && !find("Secret", v.secret.secretName)) {
      problems.push(`${name(owner)}: volume ${v.name} names Secret ${v.secret.secretName}, which does not exist`);
    }
  }
  if (owner.kind === "Job" && owner.spec.podFailurePolicy && spec.restartPolicy !== "Never") {
    problems.push(`${name(owner)}: podFailurePolicy needs restartPolicy: Never`);
  }
}

for (const [cm, binaries] of configMapUsers) {
  for (const key of Object.keys(find("ConfigMap", cm)?.data ?? {})) {
    if (!key.startsWith("PS_")) continue;
    const flag = key.slice(3).toLowerCase();
    if (!binaries.some((b) => flags[b]?.includes(flag))) {
      problems.push(`ConfigMap/${cm}: ${key} is not a flag of ${[...new Set(binaries)].join(" or ")}`);
    }
  }
}

// Counts: shards and workers must agree everywhere.
const config = Object.assign({}, ...byKind("ConfigMap").map((c) => c.data ?? {}));
const shards = byKind("StatefulSet")[0];
const workers = byKind("Job")[0];
if (shards && config.PS_NUM_SHARDS !== undefined) {
  if (Number(config.PS_NUM_SHARDS) !== shards.spec.replicas) {
    problems.push(`${name(shards)}: replicas ${shards.spec.replicas} but PS_NUM_SHARDS is ${config.PS_NUM_SHARDS}`);
  }
  const servers = (config.PS_SERVERS ?? "").split(",").filter((s) => s);
  if (servers.length !== shards.spec.replicas) {
    problems.push(`ConfigMap: PS_SERVERS lists ${servers.length} servers but ${name(shards)} has ${shards.spec.replicas} replicas`);
  }
  const svc = find("Service", shards.spec.serviceName);
  const grpcPort = svc?.spec.ports?.find((p) => p.name === "grpc")?.port;
  servers.forEach((s, i) => {
    const want = `${shards.metadata.name}-${i}.${shards.spec.serviceName}:${grpcPort}`;
    if (!s.startsWith(`${shards.metadata.name}-${i}.${shards.spec.serviceName}`) || !s.endsWith(`:${grpcPort}`)) {
      problems.push(`ConfigMap: PS_SERVERS entry ${i} is ${s}, expected ${want} (shard i is pod ${shards.metadata.name}-i)`);
    }
  });
}
if (workers && config.PS_NUM_WORKERS !== undefined) {
  if (Number(config.PS_NUM_WORKERS) !== workers.spec.completions) {
    problems.push(`${name(workers)}: completions ${workers.spec.completions} but PS_NUM_WORKERS is ${config.PS_NUM_WORKERS}`);
  }
  if (workers.spec.completionMode !== "Indexed") {
    problems.push(`${name(workers)}: completionMode must be Indexed (the rank is JOB_COMPLETION_INDEX)`);
  }
  if ((workers.spec.parallelism ?? 1) < workers.spec.completions) {
    problems.push(`${name(workers)}: parallelism ${workers.spec.parallelism} < completions: BSP needs every rank at once`);
  }
}

for (const p of problems) console.log(p);
console.log(problems.length === 0 ? `ok: ${docs.length} objects` : `${problems.length} problem(s)`);
process.exit(problems.length === 0 ? 0 : 1);
