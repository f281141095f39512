import { Writable } from 'node:stream';
import test from 'ava';
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
