#!/usr/bin/env node
// Generates deploy/helm/rpcrdma-gateway/values.schema.json (JSON Schema draft-07, what Helm validates
// values against on install, upgrade, lint and template) from the `## @param` comments of values.yaml.
//
//   ## @param dotted.key [modifiers] description
//
// The type comes from the default value in values.yaml (integer, number, boolean, string, object, array);
// modifiers, comma-separated: `object` / `array` (a free-form map or list: any keys or items), `nullable`,
// `enum:A|B|C` (numbers stay numbers when the default is a number), `min:N`, `max:N`, `multipleOf:N`,
// `pattern:/RE/` (a string's JSON Schema pattern; inside the slashes `/` is written `\/`, and `,` and `]`
// are the pattern's own). Every mapping made of
// documented keys is closed (`additionalProperties: false`), so a misspelt value fails `helm install`
// instead of being ignored. A key in values.yaml without an @param, or an @param without a key, is an
// error. `--check` writes nothing and exits 1 when the schema on disk differs (the test suite runs it).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

const chartDir = resolve(dirname(fileURLToPath(import.meta.url)), '..', 'helm', 'rpcrdma-gateway');

function typeOf(v) {
  if (Array.isArray(v)) return 'array';
  if (v === null) return 'null';
  if (typeof v === 'number') return Number.isInteger(v) ? 'integer' : 'number';
  return typeof v;
}

/** Parses `## @param` lines into { key, modifiers, description }. */
export function readParams(valuesText) {
  const params = [];
  for (const line of valuesText.split('\n')) {
    // The modifiers: anything but `]` and `/`, or a `/…/` pattern, in which `]` and `,` are literal.
    const m = /^\s*## @param ([A-Za-z0-9_.]+)(?: \[((?:[^\]/]|\/(?:\\.|[^/\\])*\/)*)\])? ?(.*)$/.exec(line);
    if (!m) continue;
    const modifiers = (m[2] ?? '').match(/(?:[^,/]|\/(?:\\.|[^/\\])*\/)+/g) ?? [];
    params.push({
      key: m[1],
      modifiers: modifiers.map((x) => x.trim()).filter(Boolean),
      description: m[3].trim(),
    });
  }
  return params;
}

function leafSchema(param, value) {
  const s = {};
  let type = typeOf(value);
  for (const mod of param.modifiers) {
    if (mod === 'object' || mod === 'array') type = mod;
  }
  if (type !== typeOf(value) && !(type === 'object' && typeOf(value) === 'object'))
    throw new Error(`${param.key}: modifier says ${type} but the default is ${typeOf(value)}`);
  s.type = param.modifiers.includes('nullable') ? [type, 'null'] : type;
  s.description = param.description;
  for (const mod of param.modifiers) {
    const colon = mod.indexOf(':');
    const name = (colon < 0 ? mod : mod.slice(0, colon)).trim();
    const arg = colon < 0 ? undefined : mod.slice(colon + 1).trim();
    if (name === 'enum') {
      s.enum = arg.split('|').map((x) => (type === 'integer' || type === 'number' ? Number(x) : x));
      if (!s.enum.includes(value)) throw new Error(`${param.key}: default ${value} is not in its enum`);
    } else if (name === 'min') s.minimum = Number(arg);
    else if (name === 'max') s.maximum = Number(arg);
    else if (name === 'multipleOf') {
      s.multipleOf = Number(arg);
      if (!(s.multipleOf > 0) || value % s.multipleOf !== 0)
        throw new Error(`${param.key}: default ${value} is not a multiple of ${arg}`);
    } else if (name === 'pattern') {
      const p = /^\/(.*)\/$/.exec(arg ?? '');
      if (!p) throw new Error(`${param.key}: pattern must be written /RE/, got ${arg}`);
      s.pattern = p[1].replace(/\\\//g, '/');
      if (!new RegExp(s.pattern, 'u').test(value))
        throw new Error(`${param.key}: default ${JSON.stringify(value)} does not match its pattern`);
    } else if (!['object', 'array', 'nullable'].includes(name))
      throw new Error(`${param.key}: unknown modifier ${mod}`);
  }
  s.default = value;
  return s;
}

export function generateSchema(valuesText) {
  const values = parseYaml(valuesText);
  const params = readParams(valuesText);
  const root = { type: 'object', properties: {}, additionalProperties: false };
  const documented = new Set();
  for (const p of params) {
    const path = p.key.split('.');
    let node = root;
    let value = values;
    for (let i = 0; i < path.length; i++) {
      const part = path[i];
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part))
        throw new Error(`@param ${p.key}: no such key in values.yaml`);
      value = value[part];
      if (i === path.length - 1) node.properties[part] = leafSchema(p, value);
      else {
        node.properties[part] ??= { type: 'object', properties: {}, additionalProperties: false };
        node = node.properties[part];
      }
    }
    documented.add(p.key);
  }
  // Every leaf (or free-form map/list) in values.yaml must be documented.
  const walk = (obj, prefix) => {
    for (const [k, v] of Object.entries(obj)) {
      const key = prefix ? `${prefix}.${k}` : k;
      if (documented.has(key)) continue;
      if (v !== null && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length) walk(v, key);
      else throw new Error(`values.yaml key ${key} has no @param comment`);
    }
  };
  walk(values, '');
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    title: 'rpcrdma-gateway chart values',
    description:
      'Generated by deploy/scripts/generate-values-schema.mjs from the @param comments of values.yaml: do not edit.',
    ...root,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const text = `${JSON.stringify(generateSchema(readFileSync(join(chartDir, 'values.yaml'), 'utf8')), null, 2)}\n`;
  const out = join(chartDir, 'values.schema.json');
  if (process.argv.includes('--check')) {
    let current = '';
    try {
      current = readFileSync(out, 'utf8');
    } catch {}
    if (current !== text) {
      process.stderr.write(
        `generate-values-schema: ${out} is out of date (run node deploy/scripts/generate-values-schema.mjs)\n`,
      );
      process.exitCode = 1;
    }
  } else {
    writeFileSync(out, text);
    process.stdout.write(`wrote ${out}\n`);
  }
}
