/**
 * The admin rules have one source (`admin-api/access-rules.ts`): every case below goes through the
 * configuration loader (as environment variables, the way a container sets them) and through the admin
 * API's start (`createAdminApi` with the same settings), and both must come to the same outcome — accepted,
 * or refused naming the same key.
 */
import test from 'ava';
import { request } from 'undici';
import { checkAdminAccess, createAdminApi } from '../../admin-api/index.js';
import { GatewayError } from '../../common/errors.js';
import { envName, loadConfig } from '../../gateway/config.js';
import { captureLogger } from '../gateway/helpers.js';
import { FakeControl } from './fake-control.js';

interface Case {
  name: string;
  host: string;
  token?: string;
  protectReads?: boolean;
  allowUnauthenticatedWrites?: boolean;
  /** 'ok', or the key the refusal names. */
  outcome: 'ok' | 'admin.token' | 'admin.allowUnauthenticatedWrites' | 'admin.protectReads';
}

const CASES: Case[] = [
  { name: 'defaults', host: '127.0.0.1', outcome: 'ok' },
  { name: 'a token on a wildcard listener', host: '0.0.0.0', token: 'tok', outcome: 'ok' },
  {
    name: 'open writes on loopback',
    host: '127.0.0.1',
    allowUnauthenticatedWrites: true,
    outcome: 'ok',
  },
  { name: 'open writes on localhost', host: 'localhost', allowUnauthenticatedWrites: true, outcome: 'ok' },
  { name: 'open writes on ::1', host: '::1', allowUnauthenticatedWrites: true, outcome: 'ok' },
  {
    name: 'open writes on a wildcard listener',
    host: '0.0.0.0',
    allowUnauthenticatedWrites: true,
    outcome: 'admin.allowUnauthenticatedWrites',
  },
  {
    name: 'open writes beyond loopback, even with a token',
    host: '10.1.2.3',
    token: 'tok',
    allowUnauthenticatedWrites: true,
    outcome: 'admin.allowUnauthenticatedWrites',
  },
  {
    name: 'protected reads without a token',
    host: '127.0.0.1',
    protectReads: true,
    outcome: 'admin.protectReads',
  },
  { name: 'protected reads with a token', host: '0.0.0.0', token: 'tok', protectReads: true, outcome: 'ok' },
  {
    name: 'protected reads with a token of whitespace only',
    host: '127.0.0.1',
    token: '  \n',
    protectReads: true,
    outcome: 'admin.protectReads',
  },
  {
    name: 'a token with surrounding whitespace (a Secret from a file)',
    host: '127.0.0.1',
    token: ' padded-token=\n',
    protectReads: true,
    outcome: 'ok',
  },
  {
    name: 'a token no Authorization header can carry',
    host: '127.0.0.1',
    token: 'two words',
    outcome: 'admin.token',
  },
  { name: 'a token with a non-ASCII letter', host: '127.0.0.1', token: 'tökén', outcome: 'admin.token' },
  {
    name: 'a bad token is named before the other rules',
    host: '0.0.0.0',
    token: 'a:b',
    protectReads: true,
    allowUnauthenticatedWrites: true,
    outcome: 'admin.token',
  },
];

function envOf(c: Case): Record<string, string> {
  const listen = c.host.includes(':') ? `[${c.host}]:0` : `${c.host}:0`;
  const env: Record<string, string> = { [envName('admin.listen')]: listen };
  if (c.token !== undefined) env[envName('admin.token')] = c.token;
  if (c.protectReads) env[envName('admin.protectReads')] = 'true';
  if (c.allowUnauthenticatedWrites) env[envName('admin.allowUnauthenticatedWrites')] = 'true';
  return env;
}

/** The outcome of loading the configuration: 'ok', or the key its ConfigError names. */
function throughConfig(c: Case): { outcome: string; message?: string; token?: string } {
  try {
    const { config } = loadConfig({ env: envOf(c) });
    return { outcome: 'ok', token: config.admin.token };
  } catch (err) {
    if (!(err instanceof GatewayError) || err.code !== 'ERR_CONFIG_VALUE') throw err;
    return { outcome: String(err.details.key), message: err.message };
  }
}

/** The outcome of starting the admin API with the same settings. */
async function throughApp(c: Case): Promise<{ outcome: string; message?: string }> {
  const { logger } = captureLogger();
  try {
    const api = await createAdminApi({
      control: new FakeControl(),
      logger,
      host: c.host,
      port: 0,
      token: c.token,
      protectReads: c.protectReads,
      allowUnauthenticatedWrites: c.allowUnauthenticatedWrites,
    });
    await api.close();
    return { outcome: 'ok' };
  } catch (err) {
    if (!(err instanceof GatewayError) || err.code !== 'ERR_ADMIN_CONFIG') throw err;
    return { outcome: String(err.details.key), message: err.message };
  }
}

for (const c of CASES) {
  test(`config loading and admin API start agree: ${c.name} → ${c.outcome}`, async (t) => {
    const config = throughConfig(c);
    const app = await throughApp(c);
    t.is(config.outcome, c.outcome, config.message);
    t.is(app.outcome, c.outcome, app.message);
    // The rule itself says the same.
    const verdict = checkAdminAccess({
      host: c.host,
      token: c.token ?? '',
      protectReads: c.protectReads === true,
      allowUnauthenticatedWrites: c.allowUnauthenticatedWrites === true,
    });
    t.is(verdict.ok ? 'ok' : verdict.violation.key, c.outcome);
    if (c.outcome !== 'ok') {
      // The configuration error names the variable the value came from; neither error shows the token.
      t.true(config.message?.includes(envName(c.outcome)), config.message);
      t.regex(app.message ?? '', /^admin API: /);
      if (c.token !== undefined && c.token.trim() !== '') {
        t.false(config.message?.includes(c.token.trim()), config.message);
        t.false(app.message?.includes(c.token.trim()), app.message);
      }
    }
  });
}

test('the admin API takes the token as the configuration keeps it: trimmed', async (t) => {
  const c = CASES.find((x) => x.name.startsWith('a token with surrounding whitespace'))!;
  const { token } = throughConfig(c);
  t.is(token, 'padded-token=');
  const { logger } = captureLogger();
  const api = await createAdminApi({
    control: new FakeControl(),
    logger,
    port: 0,
    token: c.token,
    protectReads: true,
  });
  try {
    const { url } = await api.listen();
    const res = await request(`${url}/v1/stats`, { headers: { authorization: `Bearer ${token}` } });
    await res.body.dump();
    t.is(res.statusCode, 200);
  } finally {
    await api.close();
  }
});

test('with the admin API off only the token is checked', (t) => {
  t.notThrows(() =>
    loadConfig({
      env: {
        [envName('admin.listen')]: 'off',
        [envName('admin.protectReads')]: 'true',
        [envName('admin.allowUnauthenticatedWrites')]: 'true',
      },
    }),
  );
  t.throws(
    () => loadConfig({ env: { [envName('admin.listen')]: 'off', [envName('admin.token')]: 'two words' } }),
    { code: 'ERR_CONFIG_VALUE', message: /^admin\.token: expected a bearer token/ },
  );
  const off = checkAdminAccess({
    host: undefined,
    token: '',
    protectReads: true,
    allowUnauthenticatedWrites: true,
  });
  t.true(off.ok);
});
