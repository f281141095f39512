import { Writable } from 'node:stream';
import test from 'ava';
import { ConfigError } from '../../common/errors.js';
import { componentLogger, createLogger, loadPretty, wantsPretty } from '../../gateway/logging.js';

function sink(isTTY?: boolean) {
  const chunks: string[] = [];
  const stream = Object.assign(
    new Writable({
      write(c: Buffer, _e, done) {
        chunks.push(c.toString());
        done();
      },
    }),
    { isTTY },
  );
  return { stream, text: () => chunks.join('') };
}

test('JSON lines by default, with level and component child fields', (t) => {
  const out = sink(false);
  const root = createLogger({ level: 'info', destination: out.stream });
  componentLogger(root, 'frontend', { listen: '127.0.0.1:2049' }).info({ conn: 3 }, 'hello');
  root.debug('not at info');
  const lines = out.text().trim().split('\n');
  t.is(lines.length, 1);
  const line = JSON.parse(lines[0]);
  t.is(line.component, 'frontend');
  t.is(line.conn, 3);
  t.is(line.msg, 'hello');
  t.is(line.level, 30);
});

test('pretty on a terminal (auto) or when asked, when pino-pretty is installed', (t) => {
  t.true(wantsPretty('auto', { isTTY: true }));
  t.false(wantsPretty('auto', { isTTY: false }));
  t.true(wantsPretty('pretty', {}));
  t.false(wantsPretty('json', { isTTY: true }));
  t.truthy(loadPretty(), 'pino-pretty is a dependency');
  const out = sink(false);
  createLogger({ format: 'pretty', destination: out.stream }).info('pretty line');
  t.regex(out.text(), /INFO.*pretty line/);
  t.throws(() => JSON.parse(out.text()));
});

test('err fields keep our error classes: a GatewayError and its toLog() both log their class and code', (t) => {
  const out = sink(false);
  const log = createLogger({ level: 'info', destination: out.stream });
  const e = new ConfigError('ERR_CONFIG_VALUE', 'frontend.maxRecordSize: too small', {
    key: 'frontend.maxRecordSize',
  });
  log.warn({ err: e }, 'as an error');
  log.warn({ err: e.toLog() }, 'as its structured form');
  log.warn({ err: new TypeError('plain') }, 'a plain error');
  const [a, b, c] = out
    .text()
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  for (const line of [a, b]) {
    t.is(line.err.type, 'ConfigError');
    t.is(line.err.code, 'ERR_CONFIG_VALUE');
    t.is(line.err.key, 'frontend.maxRecordSize');
  }
  t.regex(a.err.stack, /ConfigError/);
  t.is(c.err.type, 'TypeError');
  t.is(c.err.message, 'plain');
});
