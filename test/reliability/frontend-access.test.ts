/**
 * TCP frontend access control (tcp-frontend/access.ts): the allow-list of client networks and the NFS
 * `secure` privileged-port requirement, parsed strictly, enforced at accept over real sockets (source
 * addresses 127.0.0.1 vs 127.0.0.2, source ports below and above 1024 — binding a port below 1024 needs
 * root, which CI has), counted and logged with the reason; allowed clients are served as before.
 */
import { connect, type Socket } from 'node:net';
import test from 'ava';
import { TestProgramClient, TestProgramHandler } from '../../gateway/test-program/index.js';
import { ClientAccess, parseCidr } from '../../tcp-frontend/access.js';
import { type AccessPolicy, FrontendServer } from '../../tcp-frontend/server.js';
import { captureLogger, closed, waitFor } from '../gateway/helpers.js';
import { inCI } from '../helpers/peers.js';

test('CIDR rules: IPv4, IPv6, bare hosts, mapped IPv4; bad rules refused with a reason', (t) => {
  const a = new ClientAccess({ allow: ['10.0.0.0/8', '192.168.1.7', '2001:db8::/32', '::1'] });
  t.is(a.check('10.200.3.4', 5000), undefined);
  t.is(a.check('::ffff:10.1.1.1', 5000), undefined, 'an IPv4 client on a dual-stack listener');
  t.is(a.check('192.168.1.7', 5000), undefined);
  t.is(a.check('2001:db8:ffff::1', 5000), undefined);
  t.is(a.check('::1', 5000), undefined);
  for (const bad of ['11.0.0.1', '192.168.1.8', '2001:db9::1', '::2', '::ffff:11.0.0.1', '']) {
    t.is(a.check(bad, 5000)?.code, 'REFUSED_NOT_ALLOWED', bad);
  }
  t.like(parseCidr(' 0.0.0.0/0 '), { address: '0.0.0.0', prefix: 0, family: 'ipv4' });
  t.like(parseCidr('fe80::/10'), { prefix: 10, family: 'ipv6' });
  for (const bad of [
    '10.1.2.3/8',
    '10.0.0.0/33',
    '::1/129',
    'fe80::1/10',
    'example.com',
    '10.0.0.0/x',
    '1.2.3/24',
  ]) {
    const e = t.throws(() => parseCidr(bad), { code: 'ERR_ACCESS_CIDR' });
    t.true(e?.message.includes(bad), `the error names '${bad}'`);
  }
  t.true(new ClientAccess().open);
  const p = new ClientAccess({ requirePrivilegedPort: true });
  t.is(p.check('1.2.3.4', 1023), undefined);
  t.is(p.check('1.2.3.4', 1024)?.code, 'REFUSED_INSECURE_PORT');
  t.is(p.check('1.2.3.4', 0)?.code, 'REFUSED_INSECURE_PORT');
});

async function serve(access: AccessPolicy) {
  const { logger, lines } = captureLogger();
  const server = new FrontendServer({
    listen: [{ host: '0.0.0.0', port: 0 }],
    handler: new TestProgramHandler(),
    access,
    logger,
  });
  const [{ port }] = await server.listen();
  return { server, port, lines };
}

/** Connects from `localAddress` (and `localPort`); resolves once the server closed it or after `ms`. */
async function attempt(
  port: number,
  localAddress: string,
  localPort?: number,
): Promise<{ socket: Socket; refused: boolean }> {
  const socket = connect({ host: '127.0.0.1', port, localAddress, localPort });
  socket.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const refused = await Promise.race([
    closed(socket).then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 300)),
  ]);
  return { socket, refused };
}

test('a client outside the allowed networks is refused at accept, counted and logged; an allowed one is served', async (t) => {
  const { server, port, lines } = await serve({ allow: ['127.0.0.1/32'] });
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  const denied = await attempt(port, '127.0.0.2');
  t.true(denied.refused, 'the connection from 127.0.0.2 was closed');
  await waitFor(() => server.stats.connectionsRefused === 1, 'the refusal counted');
  t.is(server.stats.errors.REFUSED_NOT_ALLOWED, 1);
  t.is(server.stats.connectionsAccepted, 0, 'nothing was allocated for it');
  const line = lines.find((l) => l.reason === 'REFUSED_NOT_ALLOWED');
  t.truthy(line, 'logged with the reason');
  t.regex(String(line?.msg), /127\.0\.0\.2 is not in an allowed network/);
  t.deepEqual(line?.allow, ['127.0.0.1/32']);

  const client = await TestProgramClient.connect({ host: '127.0.0.1', port });
  t.deepEqual(await client.echo(Buffer.from('allowed')), Buffer.from('allowed'));
  await client.close();
  t.is(server.stats.connectionsAccepted, 1);
});

test('with privileged ports required, a source port >= 1024 is refused', async (t) => {
  const { server, port, lines } = await serve({ requirePrivilegedPort: true, allow: ['127.0.0.0/8'] });
  t.teardown(() => server.close({ drainTimeoutMs: 0 }));
  // The kernel's ephemeral source port (never below 1024; a fixed one may be in use by another test).
  const high = await attempt(port, '127.0.0.1');
  t.true(high.refused, 'the unprivileged source port was refused');
  await waitFor(() => server.stats.errors.REFUSED_INSECURE_PORT === 1, 'the refusal counted');
  const line = lines.find((l) => l.reason === 'REFUSED_INSECURE_PORT');
  const sourcePort = /source port (\d+) is not privileged \(< 1024\)/.exec(String(line?.msg));
  t.true(sourcePort !== null && Number(sourcePort[1]) >= 1024, String(line?.msg));
});

// Binding a source port below 1024 needs root, which CI has: there a non-root run fails this test.
const root = process.getuid?.() === 0;
if (!root && !inCI)
  process.stderr.write(
    '\n!!! not root: cannot bind a source port below 1024, so the privileged-port ACCEPT test is SKIPPED, not passed.\n' +
      '!!! Run the tests as root to prove it (CI does).\n\n',
  );

(root || inCI ? test : test.skip)(
  'with privileged ports required, a source port < 1024 is served',
  async (t) => {
    t.true(root, 'running as root (needed to bind a source port below 1024)');
    const { server, port } = await serve({ requirePrivilegedPort: true, allow: ['127.0.0.0/8'] });
    t.teardown(() => server.close({ drainTimeoutMs: 0 }));
    // A free port below 1024 (some may be taken by daemons): try a few.
    let low: Socket | undefined;
    for (let p = 1023; p > 900 && !low; p--) {
      try {
        const a = await attempt(port, '127.0.0.1', p);
        t.false(a.refused, `the privileged source port ${p} was accepted`);
        low = a.socket;
      } catch {
        // EADDRINUSE: try the next one
      }
    }
    t.truthy(low, 'a privileged source port could be bound');
    await waitFor(() => server.stats.connectionsAccepted === 1, 'the privileged client accepted');
    low?.destroy();
  },
);
