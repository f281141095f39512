/**
 * The gateway applies the frontend's access configuration (frontend.allowedClients): a client outside
 * the allowed networks is refused at accept and counted, one inside is served through the whole chain.
 */
import { connect } from 'node:net';
import test from 'ava';
import { startGateway } from '../../gateway/gateway.js';
import { TEST_PROGRAM, TEST_VERSION } from '../../gateway/test-program/constants.js';
import { testConfig } from './helpers.js';

test('frontend.allowedClients: 127.0.0.2 is served, 127.0.0.1 is refused and counted', async (t) => {
  const config = testConfig();
  config.frontend.allowedClients = ['127.0.0.2/32'];
  const g = await startGateway({ config });
  t.teardown(() => g.stop(0));
  const { port } = g.addresses[0];

  const refused = await new Promise<'closed' | 'open'>((resolve) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.1' });
    s.on('error', () => resolve('closed'));
    s.on('close', () => resolve('closed'));
    setTimeout(() => {
      resolve('open');
      s.destroy();
    }, 2000);
  });
  t.is(refused, 'closed');
  t.is(g.frontend.stats.connectionsRefused, 1);

  // A NULL call of the test program from 127.0.0.2, through the whole chain.
  const reply = await new Promise<Buffer>((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.2' });
    const call = Buffer.alloc(44);
    call.writeUInt32BE((0x8000_0000 | 40) >>> 0, 0);
    call.writeUInt32BE(0x1234, 4); // xid
    call.writeUInt32BE(0, 8); // CALL
    call.writeUInt32BE(2, 12); // rpcvers
    call.writeUInt32BE(TEST_PROGRAM, 16);
    call.writeUInt32BE(TEST_VERSION, 20);
    call.writeUInt32BE(0, 24); // NULL; cred and verf AUTH_NONE with empty bodies follow (zeros)
    let got = Buffer.alloc(0);
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (got.length >= 4 && got.length >= 4 + (got.readUInt32BE(0) & 0x7fff_ffff)) {
        s.destroy();
        resolve(got.subarray(4));
      }
    });
    s.on('error', reject);
    s.write(call);
  });
  t.is(reply.readUInt32BE(0), 0x1234, 'the client XID restored');
  t.is(reply.readUInt32BE(4), 1, 'a REPLY');
  t.is(reply.readUInt32BE(8), 0, 'MSG_ACCEPTED');
  t.is(reply.readUInt32BE(20), 0, 'SUCCESS');
  t.is(g.frontend.stats.connectionsRefused, 1);
});
