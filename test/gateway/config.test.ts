import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { ConfigError } from '../../common/errors.js';
import {
  CONFIG_SCHEMA,
  configToPlain,
  defaultText,
  envName,
  flagName,
  loadConfig,
  printableConfig,
} from '../../gateway/config.js';

const dir = mkdtempSync(join(tmpdir(), 'gw-config-'));
function file(name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}
const flags = (entries: [string, string[]][]) => new Map(entries);

test('defaults with nothing set', (t) => {
  const { config, origins } = loadConfig({ env: {} });
  t.deepEqual(config.frontend.listen, [{ host: '127.0.0.1', port: 2049 }]);
  t.is(config.frontend.maxCallsInFlight, 128);
  t.is(config.upstream, 'embedded');
  t.is(config.rdma.protocolVersion, 2);
  t.is(config.log.level, 'info');
  t.true(Object.values(origins).every((o) => o === 'default'));
});

test('precedence: defaults < file < environment < flags', (t) => {
  const yaml = file(
    'p.yaml',
    'frontend:\n  maxCallsInFlight: 10\n  maxConnections: 20\n  idleTimeoutMs: 30\nrdma:\n  credits: 40\n',
  );
  const env = {
    RPCRDMA_GATEWAY_FRONTEND_MAX_CONNECTIONS: '21',
    RPCRDMA_GATEWAY_FRONTEND_IDLE_TIMEOUT_MS: '31',
  };
  const { config, origins } = loadConfig({
    file: yaml,
    env,
    flags: flags([['frontend-idle-timeout-ms', ['32']]]),
  });
  t.is(config.frontend.maxCallsInFlight, 10);
  t.is(config.frontend.maxConnections, 21);
  t.is(config.frontend.idleTimeoutMs, 32);
  t.is(config.rdma.credits, 40);
  t.is(config.rdma.poolSize, 2);
  t.is(origins['frontend.maxCallsInFlight'], 'file');
  t.is(origins['frontend.maxConnections'], 'environment');
  t.is(origins['frontend.idleTimeoutMs'], 'flag');
  t.is(origins['rdma.poolSize'], 'default');
});

test('the file can be JSON, and be named by RPCRDMA_GATEWAY_CONFIG', (t) => {
  const json = file('c.json', JSON.stringify({ upstream: '127.0.0.1:2050', log: { level: 'debug' } }));
  const { config } = loadConfig({ env: { RPCRDMA_GATEWAY_CONFIG: json } });
  t.deepEqual(config.upstream, { host: '127.0.0.1', port: 2050 });
  t.is(config.log.level, 'debug');
});

test('addresses, lists, sizes and aliases', (t) => {
  const { config } = loadConfig({
    env: { RPCRDMA_GATEWAY_FRONTEND_MAX_RECORD_SIZE: '1MiB', RPCRDMA_GATEWAY_RDMA_INLINE_SEND: '8k' },
    flags: flags([
      ['listen', ['0.0.0.0', '[::1]:3049']],
      ['peer', ['rdma.example:20049']],
      ['log-level', ['warn']],
      ['rdma-protocol-version', ['1']],
    ]),
  });
  t.deepEqual(config.frontend.listen, [
    { host: '0.0.0.0', port: 2049 },
    { host: '::1', port: 3049 },
  ]);
  t.is(config.frontend.maxRecordSize, 1024 * 1024);
  t.is(config.rdma.inlineSend, 8192);
  t.deepEqual(config.rdma.peer, { host: 'rdma.example', port: 20049 });
  t.is(config.log.level, 'warn');
  t.is(config.rdma.protocolVersion, 1);
  const env = loadConfig({ env: { RPCRDMA_GATEWAY_FRONTEND_LISTEN: '127.0.0.1:1,127.0.0.2:2' } });
  t.is(env.config.frontend.listen.length, 2);
});

function configError(t: import('ava').ExecutionContext, fn: () => unknown): ConfigError {
  const err = t.throws(fn, { instanceOf: ConfigError }) as ConfigError;
  return err;
}

test('validation errors name the key and the source', (t) => {
  let e = configError(t, () => loadConfig({ env: { RPCRDMA_GATEWAY_RDMA_CREDITS: 'abc' } }));
  t.is(e.code, 'ERR_CONFIG_VALUE');
  t.is(e.details.key, 'rdma.credits');
  t.regex(e.message, /^rdma\.credits: .*RPCRDMA_GATEWAY_RDMA_CREDITS/);

  e = configError(t, () => loadConfig({ env: {}, flags: flags([['rdma-inline-receive', ['5000']]]) }));
  t.is(e.details.key, 'rdma.inlineReceive');
  t.regex(e.message, /multiple of 1024.*--rdma-inline-receive/);

  const yaml = file('bad.yaml', 'frontend:\n  maxConnections: 0\n');
  e = configError(t, () => loadConfig({ file: yaml, env: {} }));
  t.is(e.details.key, 'frontend.maxConnections');
  t.true(e.message.includes(yaml));

  e = configError(t, () => loadConfig({ env: {}, flags: flags([['provider', ['hardware']]]) }));
  t.regex(e.message, /rdma\.provider: expected one of auto, soft, native/);

  e = configError(t, () => loadConfig({ env: {}, flags: flags([['upstream', ['nohost']]]) }));
  t.is(e.details.key, 'upstream');
  t.regex(e.message, /has no port/);

  e = configError(t, () => loadConfig({ env: {}, flags: flags([['listen', ['127.0.0.1:99999']]]) }));
  t.is(e.details.key, 'frontend.listen');
});

test('unknown keys are errors, with a suggestion', (t) => {
  let e = configError(t, () =>
    loadConfig({ file: file('u.yaml', 'frontend:\n  maxConections: 3\n'), env: {} }),
  );
  t.is(e.code, 'ERR_CONFIG_UNKNOWN_KEY');
  t.is(e.details.key, 'frontend.maxConections');
  t.regex(e.message, /did you mean frontend\.maxConnections/);
  e = configError(t, () => loadConfig({ env: { RPCRDMA_GATEWAY_LOG_LEVL: 'x' } }));
  t.is(e.details.key, 'RPCRDMA_GATEWAY_LOG_LEVL');
  t.regex(e.message, /RPCRDMA_GATEWAY_LOG_LEVEL/);
  e = configError(t, () => loadConfig({ env: {}, flags: flags([['frontend-max-conections', ['1']]]) }));
  t.regex(e.message, /--frontend-max-connections/);
  e = configError(t, () => loadConfig({ file: file('n.yaml', 'frontend: 3\n'), env: {} }));
  t.is(e.code, 'ERR_CONFIG_FILE');
  e = configError(t, () => loadConfig({ file: file('y.yaml', 'a: [\n'), env: {} }));
  t.is(e.code, 'ERR_CONFIG_FILE');
  e = configError(t, () => loadConfig({ file: join(dir, 'missing.yaml'), env: {} }));
  t.is(e.code, 'ERR_CONFIG_FILE');
});

test('Kubernetes service-link variables of a Service named like the prefix are skipped; other unknown variables are not', (t) => {
  // What the kubelet gives a pod when its namespace has Services `rpcrdma-gateway` (port nfs 2049) and
  // `rpcrdma-gateway-admin` (port admin 9249, IPv6 cluster IP), with service links on.
  const links = {
    RPCRDMA_GATEWAY_SERVICE_HOST: '10.96.0.10',
    RPCRDMA_GATEWAY_SERVICE_PORT: '2049',
    RPCRDMA_GATEWAY_SERVICE_PORT_NFS: '2049',
    RPCRDMA_GATEWAY_PORT: 'tcp://10.96.0.10:2049',
    RPCRDMA_GATEWAY_PORT_2049_TCP: 'tcp://10.96.0.10:2049',
    RPCRDMA_GATEWAY_PORT_2049_TCP_PROTO: 'tcp',
    RPCRDMA_GATEWAY_PORT_2049_TCP_PORT: '2049',
    RPCRDMA_GATEWAY_PORT_2049_TCP_ADDR: '10.96.0.10',
    RPCRDMA_GATEWAY_ADMIN_SERVICE_HOST: 'fd00:10:96::a',
    RPCRDMA_GATEWAY_ADMIN_SERVICE_PORT: '9249',
    RPCRDMA_GATEWAY_ADMIN_SERVICE_PORT_ADMIN: '9249',
    RPCRDMA_GATEWAY_ADMIN_PORT: 'tcp://[fd00:10:96::a]:9249',
    RPCRDMA_GATEWAY_ADMIN_PORT_9249_TCP: 'tcp://[fd00:10:96::a]:9249',
    RPCRDMA_GATEWAY_ADMIN_PORT_9249_TCP_PROTO: 'tcp',
    RPCRDMA_GATEWAY_ADMIN_PORT_9249_TCP_PORT: '9249',
    RPCRDMA_GATEWAY_ADMIN_PORT_9249_TCP_ADDR: 'fd00:10:96::a',
    RPCRDMA_GATEWAY_DNS_PORT_53_UDP_PROTO: 'udp',
  };
  for (const [name, value] of Object.entries(links))
    t.notThrows(() => loadConfig({ env: { [name]: value } }), name);
  const { config, origins } = loadConfig({
    env: { ...links, RPCRDMA_GATEWAY_LOG_LEVEL: 'warn' },
  });
  t.is(config.log.level, 'warn');
  t.deepEqual(
    Object.keys(origins).filter((k) => origins[k] === 'environment'),
    ['log.level'],
  );
  // Near misses stay errors: a `<SVC>_PORT` name whose value is not a service URL (a typo for a key), a
  // value of the wrong shape, and a name of no service-link shape.
  for (const [name, value] of [
    ['RPCRDMA_GATEWAY_FRONTEND_PORT', '3049'],
    ['RPCRDMA_GATEWAY_SERVICE_PORT', 'nfs'],
    ['RPCRDMA_GATEWAY_SERVICE_HOST', 'gateway.example'],
    ['RPCRDMA_GATEWAY_PORT_2049_TCP_PROTO', 'http'],
    ['RPCRDMA_GATEWAY_ADMIN_LISTN', '0.0.0.0:9249'],
  ]) {
    const e = configError(t, () => loadConfig({ env: { ...links, [name]: value } }));
    t.is(e.code, 'ERR_CONFIG_UNKNOWN_KEY', name);
    t.is(e.details.key, name);
  }
});

test('--print-config output is a valid configuration file that reproduces the configuration', (t) => {
  const loaded = loadConfig({
    env: { RPCRDMA_GATEWAY_ADMIN_TOKEN: 's3cret' },
    flags: flags([['listen', ['[::1]:3000']]]),
  });
  const text = printableConfig(loaded);
  t.false(text.includes('s3cret'), 'the token is masked');
  const back = loadConfig({ file: file('printed.json', text.replace('"***"', '"s3cret"')), env: {} });
  t.deepEqual(back.config, loaded.config);
  t.deepEqual(
    configToPlain(back.config, { revealSecrets: true }),
    configToPlain(loaded.config, { revealSecrets: true }),
  );
});

test('docs/configuration.md documents every key with its default, variable and flag', (t) => {
  const doc = readFileSync(new URL('../../../docs/configuration.md', import.meta.url), 'utf8');
  for (const d of CONFIG_SCHEMA) {
    const row = doc.split('\n').find((l) => l.startsWith(`| \`${d.key}\` |`));
    t.truthy(row, `${d.key} has a row`);
    t.true(row?.includes(`\`${defaultText(d)}\``), `${d.key} default`);
    t.true(row?.includes(envName(d.key)), `${d.key} variable`);
    t.true(row?.includes(`--${flagName(d.key)}`), `${d.key} flag`);
  }
});

test('rdma.softCrc: on by default, off from a flag or the environment', (t) => {
  t.true(loadConfig({ env: {}, flags: new Map() }).config.rdma.softCrc);
  t.false(loadConfig({ env: {}, flags: flags([['rdma-soft-crc', ['false']]]) }).config.rdma.softCrc);
  t.false(
    loadConfig({ env: { RPCRDMA_GATEWAY_RDMA_SOFT_CRC: 'false' }, flags: new Map() }).config.rdma.softCrc,
  );
  t.throws(() => loadConfig({ env: { RPCRDMA_GATEWAY_RDMA_SOFT_CRC: 'maybe' }, flags: new Map() }), {
    instanceOf: ConfigError,
    message: /rdma\.softCrc/,
  });
});
