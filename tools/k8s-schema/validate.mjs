#!/usr/bin/env node
// Validates Kubernetes objects against the official Kubernetes OpenAPI schema
// (kubernetes-models 5.1.0, generated from Kubernetes v1.36.0), as an API server
// with fieldValidation=Strict would: each object's model validate() (types,
// required fields, enums, formats) AND a walk that rejects fields the schema does
// not define (the models' JSON schemas allow unknown properties; a strict API
// server does not). Known property names come from the package's .d.ts interfaces.
//
// Custom resources are validated against the openAPIV3Schema of a
// CustomResourceDefinition given in the same input (unknown fields rejected,
// x-kubernetes-int-or-string and preserve-unknown-fields honoured; CEL rules in
// x-kubernetes-validations are NOT evaluated). Kinds outside Kubernetes without a
// CRD in the input (e.g. Volcano's PodGroup) are reported as skipped.
//
// Usage: node validate.mjs [FILE|-]   FILE holds a JSON array of objects (default stdin)
// Output: one line per problem, "<Kind> <namespace>/<name>: <json.path>: <problem>";
//         "skipped: ..." lines for objects not checked. Exit 0 = valid, 1 = problems,
//         2 = usage or setup error (e.g. packages not installed).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modules = path.join(here, "node_modules");
const models = path.join(modules, "kubernetes-models");

function die(msg) {
  process.stderr.write(`validate.mjs: ${msg}\n`);
  process.exit(2);
}

if (!fs.existsSync(path.join(models, "package.json"))) {
  die(`kubernetes-models is not installed in ${modules}; run scripts/setup.sh ` +
      `(npm ci --prefix tools/k8s-schema)`);
}
const { default: Ajv } = await import("ajv");
const { default: addFormats } = await import("ajv-formats");

// ---- the type registry, from the models' .d.ts files ----------------------------

const files = new Map();  // .d.ts path -> {interfaces, aliases, imports}

function parseType(text) {
  const t = text.trim().replace(/;$/, "").trim();
  const arr = /^Array<(.+)>$/s.exec(t);
  if (arr) return { array: parseType(arr[1]) };
  const map = /^\{\s*\[key: string\]:\s*(.+?);?\s*\}$/s.exec(t);
  if (map) return { map: parseType(map[1]) };
  if (/^I[A-Za-z0-9]+$/.test(t)) return { ref: t };
  return { leaf: t };
}

function loadFile(file) {
  if (files.has(file)) return files.get(file);
  const src = fs.readFileSync(file, "utf8");
  const info = { file, interfaces: new Map(), aliases: new Map(), imports: new Map() };
  files.set(file, info);
  for (const m of src.matchAll(/^import \{ ([^}]+) \} from "([^"]+)";/gm)) {
    const spec = m[2];
    const target = spec.startsWith(".")
      ? path.resolve(path.dirname(file), spec.replace(/\.js$/, ".d.ts"))
      : path.join(modules, spec.replace(/\.js$/, "") + ".d.ts");
    for (const name of m[1].split(",").map((s) => s.trim())) info.imports.set(name, target);
  }
  for (const m of src.matchAll(/^export type \{ ([^}]+) \}/gm)) {
    for (const pair of m[1].split(",")) {
      const [local, , exported] = pair.trim().split(/\s+/);
      if (exported) info.aliases.set(exported, local);
    }
  }
  const lines = src.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const head = /^export interface (\w+)\b.*\{$/.exec(lines[i]);
    if (!head) continue;
    const props = new Map();
    for (i++; i < lines.length && !lines[i].startsWith("}"); i++) {
      const p = /^    "([^"]+)"\??: (.*)$/.exec(lines[i]);
      if (!p) continue;
      let type = p[2];
      if (type.trim() === "{") {  // a multi-line map type, closed by "    };"
        while (++i < lines.length && !/^    \};?$/.test(lines[i])) type += " " + lines[i].trim();
        type += " }";
      }
      props.set(p[1], parseType(type));
    }
    info.interfaces.set(head[1], props);
  }
  return info;
}

// The properties of the interface `name` as seen from `file`, or null (a type alias,
// e.g. Quantity, or anything that is not an interface: accepted as a leaf).
function resolve(file, name) {
  const info = loadFile(file);
  if (info.interfaces.has(name)) return { file, props: info.interfaces.get(name) };
  const local = info.aliases.get(name);
  if (local && info.interfaces.has(local)) return { file, props: info.interfaces.get(local) };
  const target = info.imports.get(name);
  if (target && fs.existsSync(target)) return resolve(target, name);
  return null;
}

function fieldPath(parent, key) {
  if (typeof key === "number") return `${parent}[${key}]`;
  return parent ? `${parent}.${key}` : key;
}

// Reports every key of `value` that the type does not define.
function walkUnknown(value, type, file, at, problems) {
  if (value === null || value === undefined || !type) return;
  if (type.array) {
    if (Array.isArray(value)) value.forEach((v, i) => walkUnknown(v, type.array, file, fieldPath(at, i), problems));
    return;
  }
  if (type.map) {
    if (typeof value === "object" && !Array.isArray(value)) {
      for (const [k, v] of Object.entries(value)) walkUnknown(v, type.map, file, fieldPath(at, k), problems);
    }
    return;
  }
  if (!type.ref || typeof value !== "object") return;
  const t = resolve(file, type.ref);
  if (!t) return;
  if (t.props.size === 0) {
    // An opaque union in the OpenAPI spec. JSONSchemaPropsOr{Array,Bool,StringArray}
    // hold JSONSchemaProps (a CRD's nested schemas): keep checking those; skip others.
    if (!/JSONSchemaPropsOr/.test(type.ref)) return;
    const props = { ref: "IJSONSchemaProps" };
    const propsFile = path.join(path.dirname(t.file), "JSONSchemaProps.d.ts");
    if (Array.isArray(value)) {
      value.forEach((v, i) => walkUnknown(v, props, propsFile, fieldPath(at, i), problems));
    } else {
      walkUnknown(value, props, propsFile, at, problems);
    }
    return;
  }
  if (Array.isArray(value)) return;
  for (const [k, v] of Object.entries(value)) {
    if (!t.props.has(k)) {
      problems.push(`${fieldPath(at, k)}: unknown field "${k}" (fieldValidation=Strict rejects it)`);
    } else {
      walkUnknown(v, t.props.get(k), t.file, fieldPath(at, k), problems);
    }
  }
}

function ajvPath(instancePath) {
  return instancePath.split("/").slice(1).map((s) => s.replace(/~1/g, "/").replace(/~0/g, "~"))
    .reduce((acc, s) => fieldPath(acc, /^\d+$/.test(s) ? Number(s) : s), "");
}

function describe(err) {
  let msg = err.message || err.keyword;
  if (err.keyword === "enum" && err.params?.allowedValues) msg += ` (${err.params.allowedValues.join(", ")})`;
  if (err.keyword === "additionalProperties") msg = `unknown field "${err.params.additionalProperty}"`;
  return msg;
}

// ---- custom resources: the CRD's openAPIV3Schema as a JSON Schema ----------------

function toJsonSchema(s) {
  if (!s || typeof s !== "object") return s;
  const out = {};
  for (const [k, v] of Object.entries(s)) {
    if (k.startsWith("x-kubernetes-") || k === "description") continue;
    if (k === "properties") {
      out.properties = Object.fromEntries(Object.entries(v).map(([p, ps]) => [p, toJsonSchema(ps)]));
    } else if (k === "items" || k === "additionalProperties" || k === "not") {
      out[k] = typeof v === "object" ? toJsonSchema(v) : v;
    } else if (k === "anyOf" || k === "allOf" || k === "oneOf") {
      out[k] = v.map(toJsonSchema);
    } else {
      out[k] = v;
    }
  }
  if (s.exclusiveMinimum === true) {
    out.exclusiveMinimum = s.minimum;
    delete out.minimum;
  }
  if (s.exclusiveMaximum === true) {
    out.exclusiveMaximum = s.maximum;
    delete out.maximum;
  }
  if (s["x-kubernetes-int-or-string"] && !s.anyOf) out.anyOf = [{ type: "integer" }, { type: "string" }];
  if (s.properties && !s["x-kubernetes-preserve-unknown-fields"] && s.additionalProperties === undefined) {
    out.additionalProperties = false;  // as fieldValidation=Strict
  }
  return out;
}

const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
ajv.addFormat("int32", { type: "number", validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addFormat("int64", { type: "number", validate: (n) => Number.isInteger(n) });

const crds = new Map();  // "group/version/Kind" -> compiled validator

// ---- main -----------------------------------------------------------------------

const arg = process.argv[2];
let input;
try {
  input = JSON.parse(fs.readFileSync(arg && arg !== "-" ? arg : 0, "utf8"));
} catch (e) {
  die(`cannot read a JSON array of objects from ${arg || "stdin"}: ${e.message}`);
}
if (!Array.isArray(input)) die("the input must be a JSON array of Kubernetes objects");

const crdProblems = new Map();  // CRD object -> problems compiling its schemas
for (const o of input) {
  if (o?.apiVersion === "apiextensions.k8s.io/v1" && o?.kind === "CustomResourceDefinition") {
    (o.spec?.versions ?? []).forEach((v, i) => {
      const schema = v.schema?.openAPIV3Schema;
      if (!schema) return;
      const root = toJsonSchema(schema);
      root.properties = { ...root.properties, metadata: { type: "object" } };
      try {
        crds.set(`${o.spec.group}/${v.name}/${o.spec.names?.kind}`, ajv.compile(root));
      } catch (e) {
        const list = crdProblems.get(o) ?? [];
        list.push(`spec.versions[${i}].schema.openAPIV3Schema: not a valid schema: ${e.message}`);
        crdProblems.set(o, list);
      }
    });
  }
}

const objectMetaFile = path.join(modules, "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta.d.ts");
const { ObjectMeta } = await import(pathToFileURL(objectMetaFile.replace(/\.d\.ts$/, ".js")));

let failed = 0;
for (const [i, o] of input.entries()) {
  const id = `${o?.kind ?? "object"} ${o?.metadata?.namespace ? o.metadata.namespace + "/" : ""}${o?.metadata?.name ?? "#" + i}`;
  const problems = [...(crdProblems.get(o) ?? [])];
  if (!o || typeof o !== "object" || typeof o.apiVersion !== "string" || typeof o.kind !== "string") {
    problems.push("(top level): needs apiVersion and kind strings");
  } else {
    const modelFile = path.join(models, o.apiVersion, `${o.kind}.js`);
    const crd = crds.get(`${o.apiVersion}/${o.kind}`);
    if (fs.existsSync(modelFile)) {
      const mod = await import(pathToFileURL(modelFile));
      try {
        new mod[o.kind](o).validate();
      } catch (e) {
        for (const err of e.errors ?? [{ instancePath: "", message: e.message }]) {
          problems.push(`${ajvPath(err.instancePath) || "(top level)"}: ${describe(err)}`);
        }
      }
      walkUnknown(o, { ref: `I${o.kind}` }, modelFile.replace(/\.js$/, ".d.ts"), "", problems);
    } else if (crd) {
      if (!crd(o)) {
        for (const err of crd.errors) problems.push(`${ajvPath(err.instancePath) || "(top level)"}: ${describe(err)}`);
      }
      try {
        new ObjectMeta(o.metadata ?? {}).validate();
      } catch (e) {
        for (const err of e.errors ?? []) problems.push(`metadata${ajvPath(err.instancePath) ? "." + ajvPath(err.instancePath) : ""}: ${describe(err)}`);
      }
      walkUnknown(o.metadata, { ref: "IObjectMeta" }, objectMetaFile, "metadata", problems);
    } else {
      console.log(`skipped: ${id} (${o.apiVersion}): not in the Kubernetes schema and no CustomResourceDefinition for it in the input`);
      continue;
    }
  }
  for (const p of problems) console.log(`${id}: ${p}`);
  if (problems.length > 0) failed++;
}
if (failed > 0) {
  console.log(`${failed} of ${input.length} objects failed validation`);
  process.exit(1);
}
console.log(`${input.length} objects checked against the Kubernetes v1.36.0 schema`);
