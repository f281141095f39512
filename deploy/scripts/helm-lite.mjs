// A small renderer for this repository's Helm chart, for machines without a helm binary (ours have none).
// It is NOT Helm: it implements the Go text/template constructs and the Sprig/Helm functions the chart
// uses, with Go's semantics for each (truthiness, pipelines passing the previous result as the last
// argument, `and`/`or` returning an operand, whitespace trimming by `{{-`/`-}}`). Anything else — an
// unknown function, a construct outside the subset, a missing key under .Values — is an error, never a
// guess, so a chart change that needs more shows up as a failed render instead of a wrong manifest.
// Missing map keys are errors (Helm's `--strict`), which also catches a template using a value that
// values.yaml does not define.
import { createHash, randomInt } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';

export class TemplateError extends Error {
  constructor(message, where) {
    super(where ? `${where}: ${message}` : message);
    this.name = 'TemplateError';
  }
}

// ---------------------------------------------------------------------------------------------- lexer
/** Splits a template into text and action nodes, applying `{{-`/`-}}` trimming. */
function lex(src, name) {
  const out = [];
  let i = 0;
  let trimNext = false;
  while (i < src.length) {
    const open = src.indexOf('{{', i);
    let text = open === -1 ? src.slice(i) : src.slice(i, open);
    if (trimNext) text = text.replace(/^\s+/, '');
    trimNext = false;
    if (open === -1) {
      if (text) out.push({ type: 'text', text });
      break;
    }
    let start = open + 2;
    if (src[start] === '-' && /\s/.test(src[start + 1])) {
      text = text.replace(/\s+$/, '');
      start += 2;
    }
    if (text) out.push({ type: 'text', text });
    const close = findClose(src, start, name);
    let end = close;
    if (src[close - 1] === '-' && /\s/.test(src[close - 2])) {
      trimNext = true;
      end = close - 2;
    }
    const body = src.slice(start, end).trim();
    const line = src.slice(0, open).split('\n').length;
    if (!(body.startsWith('/*') && body.endsWith('*/')))
      out.push({ type: 'action', body, where: `${name}:${line}` });
    i = close + 2;
  }
  return out;
}

function findClose(src, from, name) {
  let quote = null;
  for (let j = from; j < src.length - 1; j++) {
    const c = src[j];
    if (quote) {
      if (c === '\\' && quote === '"') j++;
      else if (c === quote) quote = null;
    } else if (c === '"' || c === '`') quote = c;
    else if (c === '}' && src[j + 1] === '}') return j;
  }
  throw new TemplateError('unclosed action', name);
}

/** Tokens of one action body. */
function tokenize(body, where) {
  const toks = [];
  const re =
    /\s*(?:("(?:[^"\\]|\\.)*")|(`[^`]*`)|(:=|=|\||\(|\))|(-?\d+(?:\.\d+)?)|(\$[A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)*)|(\.(?:[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)?)|([A-Za-z_][A-Za-z0-9_]*)|(,))/y;
  let m;
  re.lastIndex = 0;
  while (re.lastIndex < body.length) {
    const at = re.lastIndex;
    if (/^\s*$/.test(body.slice(at))) break;
    m = re.exec(body);
    if (!m) throw new TemplateError(`cannot parse action near "${body.slice(at, at + 20)}"`, where);
    if (m[1]) toks.push({ t: 'str', v: JSON.parse(m[1]) });
    else if (m[2]) toks.push({ t: 'str', v: m[2].slice(1, -1) });
    else if (m[3]) toks.push({ t: m[3] });
    else if (m[4]) toks.push({ t: 'num', v: Number(m[4]) });
    else if (m[5]) toks.push({ t: 'var', v: m[5] });
    else if (m[6]) toks.push({ t: 'field', v: m[6] });
    else if (m[7]) toks.push({ t: 'ident', v: m[7] });
    else toks.push({ t: ',' });
  }
  return toks;
}

// --------------------------------------------------------------------------------------------- parser
/** Parses a pipeline: optional `$a[, $b] :=` declaration, then commands separated by `|`. */
function parsePipeline(toks, where) {
  let pos = 0;
  let decl;
  if (toks[0]?.t === 'var' && (toks[1]?.t === ':=' || toks[1]?.t === '=')) {
    decl = { vars: [toks[0].v], op: toks[1].t };
    pos = 2;
  } else if (toks[0]?.t === 'var' && toks[1]?.t === ',' && toks[2]?.t === 'var' && toks[3]?.t === ':=') {
    decl = { vars: [toks[0].v, toks[2].v], op: ':=' };
    pos = 4;
  }
  // Recursive descent: a parenthesised operand is itself a pipeline.
  function commands(closing) {
    const cmds = [];
    let cmd = [];
    while (pos < toks.length) {
      const tk = toks[pos++];
      if (tk.t === ')') {
        if (!closing) throw new TemplateError('unbalanced )', where);
        cmds.push(cmd);
        if (cmds.some((c) => c.length === 0)) throw new TemplateError('empty command in pipeline', where);
        return cmds;
      }
      if (tk.t === '|') {
        cmds.push(cmd);
        cmd = [];
      } else if (tk.t === '(') cmd.push({ t: 'sub', cmds: commands(true) });
      else cmd.push(tk);
    }
    if (closing) throw new TemplateError('unbalanced (', where);
    cmds.push(cmd);
    if (cmds.some((c) => c.length === 0)) throw new TemplateError('empty command in pipeline', where);
    return cmds;
  }
  return { decl, cmds: commands(false) };
}

const BLOCKS = new Set(['if', 'with', 'range', 'define']);

/** Builds the node tree; `define` blocks are collected into `defs`. */
function parse(nodes, name, defs) {
  let i = 0;
  // Parses nodes until {{end}} or {{else...}} (when inside a block), which is left at nodes[i].
  function list(inBlock) {
    const body = [];
    while (i < nodes.length) {
      const n = nodes[i];
      if (n.type === 'text') {
        body.push(n);
        i++;
        continue;
      }
      const word = /^([a-z]+)\b/.exec(n.body)?.[1];
      if (word === 'end' || word === 'else') {
        if (!inBlock) throw new TemplateError(`unexpected {{${word}}}`, n.where);
        return body;
      }
      i++;
      if (word === 'define') {
        const tmplName = JSON.parse(n.body.slice(6).trim());
        const inner = list(true);
        if (!nodes[i]?.body.startsWith('end')) throw new TemplateError('expected {{end}} of define', n.where);
        i++;
        defs.set(tmplName, inner);
      } else if (word && BLOCKS.has(word)) body.push(block(n, word));
      else if (word === 'template') {
        const toks = tokenize(n.body.slice(8), n.where);
        const tmplName = toks.shift();
        if (tmplName?.t !== 'str') throw new TemplateError('template needs a name', n.where);
        body.push({ type: 'template', name: tmplName.v, pipe: parsePipeline(toks, n.where), where: n.where });
      } else
        body.push({
          type: 'action',
          pipe: parsePipeline(tokenize(n.body, n.where), n.where),
          where: n.where,
        });
    }
    if (inBlock) throw new TemplateError('missing {{end}}', name);
    return body;
  }
  // One if/with/range whose opening action was consumed; consumes through its {{end}}.
  function block(open, word) {
    const pipe = parsePipeline(tokenize(open.body.slice(word.length), open.where), open.where);
    const node = { type: word, pipe, body: list(true), elseBody: undefined, where: open.where };
    const stop = nodes[i];
    i++;
    if (stop.body === 'else') {
      node.elseBody = list(true);
      if (nodes[i]?.body !== 'end') throw new TemplateError('expected {{end}} after {{else}}', stop.where);
      i++;
    } else if (stop.body.startsWith('else if ')) {
      // `{{else if X}}` is an `if X` in the else branch that ends at the shared {{end}} (as in Go).
      node.elseBody = [block({ body: stop.body.slice(5), where: stop.where }, 'if')];
    } else if (stop.body !== 'end') throw new TemplateError(`unsupported {{${stop.body}}}`, stop.where);
    return node;
  }
  return list(false);
}

// ------------------------------------------------------------------------------------------ evaluation
function truthy(v) {
  if (v === null || v === undefined || v === false || v === 0 || v === '') return false;
  if (Array.isArray(v)) return v.length > 0;
  if (typeof v === 'object') return Object.keys(v).length > 0;
  return true;
}

function isMap(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

function field(base, path, where, label) {
  let v = base;
  let walked = label;
  for (const part of path) {
    if (!isMap(v)) throw new TemplateError(`${walked} is not a map (looking up .${part})`, where);
    if (!Object.hasOwn(v, part))
      throw new TemplateError(`map has no entry for key "${part}" (${walked}.${part})`, where);
    v = v[part];
    walked += `.${part}`;
  }
  return v;
}

function printValue(v) {
  if (v === null || v === undefined) return '';
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  if (Array.isArray(v)) return `[${v.map(printValue).join(' ')}]`;
  return `map[${Object.keys(v)
    .sort()
    .map((k) => `${k}:${printValue(v[k])}`)
    .join(' ')}]`;
}

function toInt(v, where) {
  const n = typeof v === 'string' ? Number.parseInt(v, 10) : Number(v);
  if (!Number.isFinite(n)) throw new TemplateError(`not a number: ${printValue(v)}`, where);
  return Math.trunc(n);
}

function goSprintf(format, args, where) {
  let k = 0;
  return format.replace(/%([-+ 0#]*\d*)([vsdqt%])/g, (_, _flags, verb) => {
    if (verb === '%') return '%';
    if (k >= args.length) throw new TemplateError(`printf: missing argument for %${verb}`, where);
    const a = args[k++];
    if (verb === 'd') return String(toInt(a, where));
    if (verb === 'q') return JSON.stringify(printValue(a));
    return printValue(a);
  });
}

function yamlOf(v) {
  if (v === null || v === undefined) return 'null';
  return stringifyYaml(v, { sortMapEntries: true, lineWidth: 0 }).replace(/\n$/, '');
}

function fillMissing(dst, src) {
  for (const [k, v] of Object.entries(src ?? {})) {
    if (!Object.hasOwn(dst, k)) dst[k] = structuredClone(v);
    else if (isMap(dst[k]) && isMap(v)) fillMissing(dst[k], v);
  }
}

const ALNUM = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** Creates the function table; `include` needs the renderer. */
function functions(render) {
  const cmp = (name, f) => (a, b) => {
    if (typeof a !== typeof b)
      throw new TemplateError(`${name}: incompatible types ${typeof a} and ${typeof b}`);
    return f(a, b);
  };
  return {
    include: (name, data) => render(name, data),
    toYaml: yamlOf,
    toJson: (v) => JSON.stringify(v ?? null),
    fromYaml: (s) => parseYaml(s) ?? {},
    indent: (n, s) =>
      s
        .split('\n')
        .map((l) => ' '.repeat(n) + l)
        .join('\n'),
    nindent: (n, s) =>
      `\n${s
        .split('\n')
        .map((l) => ' '.repeat(n) + l)
        .join('\n')}`,
    quote: (...xs) => xs.map((x) => JSON.stringify(printValue(x))).join(' '),
    squote: (...xs) => xs.map((x) => `'${printValue(x)}'`).join(' '),
    default: (d, ...rest) => (rest.length && truthy(rest[0]) ? rest[0] : d),
    required: (msg, v) => {
      if (v === null || v === undefined || v === '') throw new TemplateError(`required: ${msg}`);
      return v;
    },
    fail: (msg) => {
      throw new TemplateError(`fail: ${msg}`);
    },
    empty: (v) => !truthy(v),
    coalesce: (...xs) => xs.find(truthy) ?? null,
    ternary: (a, b, c) => (truthy(c) ? a : b),
    trunc: (n, s) => (n >= 0 ? s.slice(0, n) : s.slice(n)),
    trimSuffix: (suf, s) => (s.endsWith(suf) ? s.slice(0, s.length - suf.length) : s),
    trimPrefix: (pre, s) => (s.startsWith(pre) ? s.slice(pre.length) : s),
    trim: (s) => s.trim(),
    lower: (s) => s.toLowerCase(),
    upper: (s) => s.toUpperCase(),
    replace: (from, to, s) => s.split(from).join(to),
    contains: (sub, s) => s.includes(sub),
    hasPrefix: (pre, s) => s.startsWith(pre),
    printf: (f, ...args) => goSprintf(f, args),
    print: (...args) => args.map(printValue).join(''),
    toString: printValue,
    int: (v) => toInt(v),
    int64: (v) => toInt(v),
    add: (...xs) => xs.reduce((a, b) => toInt(a) + toInt(b), 0),
    add1: (x) => toInt(x) + 1,
    sub: (a, b) => toInt(a) - toInt(b),
    mul: (...xs) => xs.reduce((a, b) => toInt(a) * toInt(b), 1),
    div: (a, b) => Math.trunc(toInt(a) / toInt(b)),
    max: (...xs) => Math.max(...xs.map((x) => toInt(x))),
    eq: (a, ...bs) => bs.some((b) => a === b),
    ne: (a, b) => a !== b,
    lt: cmp('lt', (a, b) => a < b),
    le: cmp('le', (a, b) => a <= b),
    gt: cmp('gt', (a, b) => a > b),
    ge: cmp('ge', (a, b) => a >= b),
    not: (v) => !truthy(v),
    len: (v) => (typeof v === 'string' || Array.isArray(v) ? v.length : Object.keys(v ?? {}).length),
    list: (...xs) => xs,
    dict: (...kv) => {
      const o = {};
      for (let j = 0; j + 1 < kv.length; j += 2) o[printValue(kv[j])] = kv[j + 1];
      return o;
    },
    hasKey: (m, k) => isMap(m) && Object.hasOwn(m, k),
    keys: (m) => Object.keys(m),
    has: (needle, list) => Array.isArray(list) && list.includes(needle),
    index: (v, ...path) =>
      path.reduce((node, k) => {
        if (node === null || node === undefined) return null;
        if (Array.isArray(node) || isMap(node)) return node[k] ?? null;
        throw new TemplateError(`index of a ${typeof node}`);
      }, v),
    deepCopy: (v) => structuredClone(v),
    // Sprig's set mutates the map and returns it.
    set: (m, k, v) => {
      m[k] = v;
      return m;
    },
    // Sprig's merge: the first map wins; later maps only fill keys it lacks (recursively).
    merge: (dst, ...srcs) => {
      for (const src of srcs) fillMissing(dst, src);
      return dst;
    },
    b64dec: (s) => Buffer.from(printValue(s), 'base64').toString('utf8'),
    b64enc: (s) => Buffer.from(printValue(s)).toString('base64'),
    sha256sum: (s) => createHash('sha256').update(printValue(s)).digest('hex'),
    randAlphaNum: (n) => Array.from({ length: toInt(n) }, () => ALNUM[randomInt(ALNUM.length)]).join(''),
    // `helm template` has no cluster: lookup always finds nothing, as here.
    lookup: () => ({}),
  };
}

class Renderer {
  constructor(defs, root) {
    this.defs = defs;
    this.root = root;
    this.funcs = functions((name, data) => this.renderNamed(name, data));
    this.depth = 0;
  }

  renderNamed(name, data) {
    const body = this.defs.get(name);
    if (!body) throw new TemplateError(`no template named "${name}"`);
    if (++this.depth > 50) throw new TemplateError(`template recursion too deep at "${name}"`);
    try {
      return this.list(body, data, new Map([['$', { v: data }]]));
    } finally {
      this.depth--;
    }
  }

  list(body, dot, vars) {
    let out = '';
    for (const n of body) out += this.node(n, dot, vars);
    return out;
  }

  node(n, dot, vars) {
    try {
      switch (n.type) {
        case 'text':
          return n.text;
        case 'action': {
          const v = this.pipeline(n.pipe, dot, vars);
          return n.pipe.decl ? '' : printValue(v);
        }
        case 'template':
          return this.renderNamed(
            n.name,
            n.pipe.cmds[0].length ? this.pipeline(n.pipe, dot, vars) : undefined,
          );
        case 'if': {
          const scope = new Map(vars);
          return truthy(this.pipeline(n.pipe, dot, scope))
            ? this.list(n.body, dot, scope)
            : n.elseBody
              ? this.list(n.elseBody, dot, scope)
              : '';
        }
        case 'with': {
          const scope = new Map(vars);
          const v = this.pipeline(n.pipe, dot, scope);
          return truthy(v)
            ? this.list(n.body, v, scope)
            : n.elseBody
              ? this.list(n.elseBody, dot, scope)
              : '';
        }
        case 'range': {
          const decl = n.pipe.decl;
          const v = this.pipeline({ cmds: n.pipe.cmds }, dot, vars);
          const entries = Array.isArray(v)
            ? v.map((x, k) => [k, x])
            : isMap(v)
              ? Object.keys(v)
                  .sort()
                  .map((k) => [k, v[k]])
              : v === null || v === undefined
                ? []
                : typeof v === 'number'
                  ? Array.from({ length: v }, (_, k) => [k, k])
                  : null;
          if (entries === null) throw new TemplateError(`range can't iterate over ${printValue(v)}`);
          if (entries.length === 0) return n.elseBody ? this.list(n.elseBody, dot, vars) : '';
          let out = '';
          for (const [k, x] of entries) {
            const scope = new Map(vars);
            if (decl?.vars.length === 2) {
              scope.set(decl.vars[0], { v: k });
              scope.set(decl.vars[1], { v: x });
            } else if (decl) scope.set(decl.vars[0], { v: x });
            out += this.list(n.body, x, scope);
          }
          return out;
        }
        default:
          throw new TemplateError(`unknown node ${n.type}`);
      }
    } catch (err) {
      if (err instanceof TemplateError && !err.located) {
        err.message = `${n.where ?? ''}: ${err.message}`;
        err.located = true;
      }
      throw err;
    }
  }

  pipeline(pipe, dot, vars) {
    let value;
    let first = true;
    for (const cmd of pipe.cmds) {
      value = this.command(cmd, dot, vars, first ? [] : [value]);
      first = false;
    }
    if (pipe.decl) {
      const name = pipe.decl.vars[0];
      // `:=` declares in the current scope; `=` assigns the variable where it was declared (Go semantics):
      // scopes copy the map of bindings, and a binding is a shared box.
      if (pipe.decl.op === ':=') vars.set(name, { v: value });
      else if (vars.has(name)) vars.get(name).v = value;
      else throw new TemplateError(`undefined variable ${name}`);
    }
    return value;
  }

  command(cmd, dot, vars, piped) {
    const [head, ...rest] = cmd;
    if (head.t === 'ident' && !['true', 'false', 'nil'].includes(head.v)) {
      const fn = head.v === 'and' || head.v === 'or' ? true : this.funcs[head.v];
      if (!fn) throw new TemplateError(`function "${head.v}" not defined (not in this renderer's subset)`);
      // `and`/`or` short-circuit and return an operand, as in Go.
      if (head.v === 'and' || head.v === 'or') {
        let v;
        for (const a of [...rest, ...piped.map((p) => ({ t: 'value', v: p }))]) {
          v = this.operand(a, dot, vars);
          if (head.v === 'and' ? !truthy(v) : truthy(v)) return v;
        }
        return v;
      }
      return fn(...rest.map((a) => this.operand(a, dot, vars)), ...piped);
    }
    if (rest.length || piped.length) throw new TemplateError('arguments given to a non-function');
    return this.operand(head, dot, vars);
  }

  operand(tk, dot, vars) {
    switch (tk.t) {
      case 'str':
      case 'num':
      case 'value':
        return tk.v;
      case 'ident':
        if (tk.v === 'true') return true;
        if (tk.v === 'false') return false;
        if (tk.v === 'nil') return null;
        return this.command([tk], dot, vars, []);
      case 'field':
        return tk.v === '.' ? dot : field(dot, tk.v.slice(1).split('.'), undefined, '.');
      case 'var': {
        const [name, ...path] = tk.v.split('.');
        if (!vars.has(name)) throw new TemplateError(`undefined variable ${name}`);
        return field(vars.get(name).v, path, undefined, name);
      }
      case 'sub':
        return this.pipeline({ cmds: tk.cmds }, dot, vars);
      default:
        throw new TemplateError(`unexpected token ${tk.t}`);
    }
  }
}

/**
 * Renders `chartDir` with `values` (already merged over values.yaml by the caller, or use renderChart's
 * `valuesFiles`). Returns the manifests (non-empty rendered template files, by path) and NOTES.txt.
 */
export function renderChart(chartDir, { valuesFiles = [], release = {} } = {}) {
  const chart = parseYaml(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8'));
  let values = parseYaml(readFileSync(join(chartDir, 'values.yaml'), 'utf8')) ?? {};
  for (const f of valuesFiles) values = deepMerge(values, parseYaml(readFileSync(f, 'utf8')) ?? {});
  const templatesDir = join(chartDir, 'templates');
  const files = readdirSync(templatesDir).sort();
  const defs = new Map();
  const basePath = `${chart.name}/templates`;
  for (const f of files) {
    const path = `${basePath}/${f}`;
    defs.set(path, parse(lex(readFileSync(join(templatesDir, f), 'utf8'), path), path, defs));
  }
  const root = {
    Values: values,
    Chart: { Name: chart.name, Version: chart.version, AppVersion: chart.appVersion ?? '' },
    Release: {
      Name: release.name ?? 'release-name',
      Namespace: release.namespace ?? 'default',
      Service: 'Helm',
      IsInstall: true,
      IsUpgrade: false,
      Revision: 1,
    },
    Template: { BasePath: basePath, Name: '' },
    Capabilities: { KubeVersion: { Version: 'v1.30.0', Major: '1', Minor: '30' } },
  };
  const renderer = new Renderer(defs, root);
  const manifests = [];
  let notes = '';
  for (const f of files) {
    if (f.startsWith('_')) continue;
    const path = `${basePath}/${f}`;
    // One top-level object for every template of the render, as Helm's engine has (it only sets its
    // Template before each file): what a template `set`s on it, the next one sees.
    root.Template = { ...root.Template, Name: path };
    const text = renderer.renderNamed(path, root);
    if (f === 'NOTES.txt') notes = text;
    else if (text.trim() !== '') manifests.push({ path, text });
  }
  return { manifests, notes, values };
}

/** Helm's value merge: maps merge recursively, everything else (lists included) is replaced. */
export function deepMerge(base, over) {
  if (!isMap(base) || !isMap(over)) return over;
  const out = { ...base };
  for (const [k, v] of Object.entries(over)) out[k] = isMap(v) && isMap(base[k]) ? deepMerge(base[k], v) : v;
  return out;
}

/** The `helm template` output: each file's documents after a `# Source:` line. */
export function formatManifests(manifests) {
  return manifests
    .map(
      ({ path, text }) => `---\n# Source: ${path}\n${text.replace(/^\s*---\s*\n/, '').replace(/\s+$/, '')}\n`,
    )
    .join('');
}
