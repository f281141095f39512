/**
 * A non-idempotent NFSv3 call whose reply is lost with the client's connection, sent again from the same
 * address and port with the same XID as Linux's client does, is answered from the real server's duplicate
 * request cache through the gateway chain: the gateway sends it again under its first gateway XID on the
 * same RDMA connection (gateway/router/departed.ts), which is where ganesha's cache knows it. The control:
 * the same call from another port runs again, and finds the file gone.
 */
import { once } from 'node:events';
import { existsSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { frameRecord, RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { opaque, xdr } from '../backchannel/nfs41-bytes.js';
import { waitFor } from '../gateway/helpers.js';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { freePorts } from '../helpers/ports.js';
import { startGanesha } from './harness/ganesha.js';
import { httpGet, startGatewayChain } from './harness/gateway-target.js';
import { useRpcbind } from './harness/rpcbind.js';
import { InteropSession } from './harness/session.js';

const test = testWithPeers('ganesha.nfsd', 'rpcbind');

const MOUNT_PROGRAM = 100005;
const NFS_PROGRAM = 100003;
const MOUNTPROC3_MNT = 1;
const NFSPROC3_REMOVE = 12;
const NFS3_OK = 0;
const NFS3ERR_NOENT = 2;

/** An RPC call as root with AUTH_SYS (the export allows `sys` only), framed as one record. */
function call(xid: number, prog: number, vers: number, proc: number, body: Buffer): Buffer {
  const cred = xdr(0, opaque('rpcrdma-drc'), 0, 0, 0);
  return Buffer.concat(frameRecord(xdr(xid, 0, 2, prog, vers, proc, 1, opaque(cred), 0, 0, body)));
}

/** A TCP client from 127.0.0.1:`localPort` (any port when 0) that collects the reply records. */
async function client(port: number, localPort = 0): Promise<{ sock: Socket; replies: Buffer[] }> {
  const sock = connect({ host: '127.0.0.1', port, ...(localPort !== 0 ? { localPort } : {}) });
  await once(sock, 'connect');
  const replies: Buffer[] = [];
  const decoder = new RecordDecoder((r) => replies.push(r));
  sock.on('data', (d) => decoder.push(d));
  sock.on('error', () => {});
  return { sock, replies };
}

/** The results of an accepted SUCCESS reply with an AUTH_NONE verifier (RFC 5531 §9), or a throw. */
function results(reply: Buffer, xid: number): Buffer {
  if (reply.readUInt32BE(0) !== xid || reply.readUInt32BE(4) !== 1 || reply.readUInt32BE(8) !== 0)
    throw new Error(`not an accepted reply to ${xid}: ${reply.subarray(0, 24).toString('hex')}`);
  const verfLength = reply.readUInt32BE(16);
  const statAt = 20 + verfLength;
  if (reply.readUInt32BE(statAt) !== 0) throw new Error(`accept_stat ${reply.readUInt32BE(statAt)}`);
  return reply.subarray(statAt + 4);
}

/** The REMOVE3res status of `name` in the directory `dir` (RFC 1813 §3.3.12), sent as `xid`. */
async function remove(c: { sock: Socket; replies: Buffer[] }, xid: number, dir: Buffer, name: string) {
  const before = c.replies.length;
  c.sock.write(call(xid, NFS_PROGRAM, 3, NFSPROC3_REMOVE, xdr(opaque(dir), opaque(name))));
  await waitFor(() => c.replies.length > before, `the REMOVE ${xid} reply`, 20_000);
  return results(c.replies[before], xid).readUInt32BE(0);
}

async function admin(url: string): Promise<Record<string, number>> {
  const res = await httpGet(`${url}/v1/stats?section=rpc`);
  return (JSON.parse(res.body) as { rpc: { events: Record<string, number> } }).rpc.events;
}

test("an NFSv3 REMOVE whose reply was lost with the connection, resent from the same port, is answered from ganesha's duplicate request cache", async (t) => {
  requireExecutable('ganesha.nfsd');
  requireExecutable('rpcbind');
  t.timeout(240_000); // includes waiting for the port-111 lock
  const session = InteropSession.open(t);
  await useRpcbind(session);
  const ganesha = await startGanesha(session, { protocols: [3] });
  const victim = `${ganesha.exportDir}/victim`;
  writeFileSync(victim, 'to be removed once');
  const chain = await startGatewayChain(session, ganesha, { beforeConnect: async () => {} }, 2);

  // The export's root handle, from ganesha's MOUNT service directly (MNT3, RFC 1813 §5.2.1).
  const mnt = await client(ganesha.endpoint.mountPort as number);
  mnt.sock.write(call(1, MOUNT_PROGRAM, 3, MOUNTPROC3_MNT, opaque(ganesha.endpoint.exportPath)));
  await waitFor(() => mnt.replies.length === 1, 'the MNT reply', 20_000);
  const mounted = results(mnt.replies[0], 1);
  mnt.sock.destroy();
  t.is(mounted.readUInt32BE(0), 0, 'MNT3_OK');
  const root = mounted.subarray(8, 8 + mounted.readUInt32BE(4));

  const [port] = await freePorts(1);
  const xid = 0x5eed_0001;
  const first = await client(chain.endpoint.nfsPort, port);
  t.is(await remove(first, xid, root, 'victim'), NFS3_OK, 'removed');
  t.false(existsSync(victim));
  // The connection is lost (a reset); as far as the client knows, the reply went with it.
  first.sock.resetAndDestroy();
  let events = await admin(chain.adminUrl);
  for (let i = 0; i < 100 && events.departures !== 1; i++) {
    await new Promise((r) => setTimeout(r, 50));
    events = await admin(chain.adminUrl);
  }
  t.is(events.departures, 1, "the gateway kept the client's last calls");

  const again = await client(chain.endpoint.nfsPort, port);
  t.is(
    await remove(again, xid, root, 'victim'),
    NFS3_OK,
    "the retransmission is answered from the server's cache, not run again (which finds no file)",
  );
  again.sock.destroy();
  events = await admin(chain.adminUrl);
  t.is(events.resumed_sent, 1, 'sent again under its first gateway XID');

  // The control: the same call from another port is another client's, and runs.
  const other = await client(chain.endpoint.nfsPort);
  t.is(await remove(other, xid, root, 'victim'), NFS3ERR_NOENT, 'run again, it finds the file gone');
  other.sock.destroy();
});
