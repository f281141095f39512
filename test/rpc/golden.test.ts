/**
 * Golden bytes from real captures (test/fixtures/rpc, made by make-fixtures.sh): an `rpcinfo` NULL call to
 * rpcbind and its reply, and an NFSv3 READ by libnfs from nfs-ganesha and its reply. Each TCP payload goes
 * through the record decoder and the RPC header decoder, and every field is compared with what tshark
 * decoded from the same frame (the PDML stored next to it), including where the procedure body starts.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import test from 'ava';
import { AuthFlavor } from '../../rpc/constants.js';
import { RpcCallHeader, RpcReplyHeader } from '../../rpc/message.js';
import { RecordDecoder } from '../../tcp-frontend/record-marking.js';
import { field, fields, type PdmlNode, proto, readPdml } from './pdml.js';

const dir = fileURLToPath(new URL('../../../test/fixtures/rpc/', import.meta.url));

interface Golden {
  /** The RPC message (record mark removed, by our record decoder). */
  record: Buffer;
  nodes: PdmlNode[];
  /** Frame offset of the first byte of the RPC message (after the record mark). */
  base: number;
}

function load(name: string): Golden {
  const payload = Buffer.from(readFileSync(`${dir}${name}.hex`, 'utf8').trim(), 'hex');
  const nodes = readPdml(`${dir}${name}.pdml`);
  const records: Buffer[] = [];
  const decoder = new RecordDecoder((r) => records.push(r));
  decoder.push(payload);
  decoder.end();
  if (records.length !== 1) throw new Error(`${name}: ${records.length} records`);
  const tcp = proto(nodes, 'tcp');
  const mark = field(nodes, 'rpc.fraglen');
  // The stored payload starts where tshark's TCP header ends, with the record mark.
  if (tcp.pos + tcp.size !== mark.pos) throw new Error(`${name}: payload does not start at the record mark`);
  if (Number(mark.show) !== records[0].length) throw new Error(`${name}: fragment length differs`);
  return { record: records[0], nodes, base: mark.pos + 4 };
}

const num = (n: PdmlNode) => Number(n.show);

test('rpcinfo NULL call to rpcbind: header fields and body offset match tshark', (t) => {
  const g = load('rpcinfo-null-call');
  const h = new RpcCallHeader().decode(g.record);
  t.is(h.xid, Number(field(g.nodes, 'rpc.xid').show));
  t.is(h.rpcvers, num(field(g.nodes, 'rpc.version')));
  t.is(h.prog, num(field(g.nodes, 'rpc.program')));
  t.is(h.prog, 100000);
  t.is(h.vers, num(field(g.nodes, 'rpc.programversion')));
  t.is(h.proc, num(field(g.nodes, 'rpc.procedure')));
  const [credFlavor, verfFlavor] = fields(g.nodes, 'rpc.auth.flavor').map(num);
  const [credLen, verfLen] = fields(g.nodes, 'rpc.auth.length').map(num);
  t.is(h.cred.flavor, credFlavor);
  t.is(h.cred.flavor, AuthFlavor.AUTH_NONE);
  t.is(h.cred.bodyLength, credLen);
  t.is(h.verf.flavor, verfFlavor);
  t.is(h.verf.bodyLength, verfLen);
  t.false(h.authSys.valid);
  // NULL has no arguments: the portmap layer starts where the message ends.
  t.is(h.bodyOffset, proto(g.nodes, 'portmap').pos - g.base);
  t.is(h.bodyOffset, g.record.length);
});

test('rpcinfo NULL reply from rpcbind: accepted SUCCESS with an empty body, as tshark says', (t) => {
  const g = load('rpcinfo-null-reply');
  const h = new RpcReplyHeader().decode(g.record);
  t.is(h.xid, Number(field(g.nodes, 'rpc.xid').show));
  t.is(h.replyStat, num(field(g.nodes, 'rpc.replystat')));
  t.is(h.acceptStat, num(field(g.nodes, 'rpc.state_accept')));
  t.is(h.verf.flavor, num(field(g.nodes, 'rpc.auth.flavor')));
  t.is(h.verf.bodyLength, num(field(g.nodes, 'rpc.auth.length')));
  t.true(h.isSuccess);
  t.is(h.bodyOffset, proto(g.nodes, 'portmap').pos - g.base);
  t.is(h.body.length, 0);
});

test('NFSv3 READ call from libnfs: AUTH_SYS fields and body offset match tshark', (t) => {
  const g = load('nfs3-read-call');
  const h = new RpcCallHeader().decode(g.record);
  t.is(h.xid, Number(field(g.nodes, 'rpc.xid').show));
  t.is(h.prog, num(field(g.nodes, 'rpc.program')));
  t.is(h.prog, 100003);
  t.is(h.vers, num(fields(g.nodes, 'rpc.programversion')[0]));
  t.is(h.proc, num(field(g.nodes, 'rpc.procedure')));
  t.is(h.proc, 6);
  const [credFlavor, verfFlavor] = fields(g.nodes, 'rpc.auth.flavor').map(num);
  const [credLen, verfLen] = fields(g.nodes, 'rpc.auth.length').map(num);
  t.is(h.cred.flavor, credFlavor);
  t.is(h.cred.flavor, AuthFlavor.AUTH_SYS);
  t.is(h.cred.bodyLength, credLen);
  t.is(h.verf.flavor, verfFlavor);
  t.is(h.verf.bodyLength, verfLen);
  t.true(h.authSys.valid);
  t.is(h.authSys.stamp, Number(field(g.nodes, 'rpc.auth.stamp').show));
  t.is(h.authSys.machinename, field(g.nodes, 'rpc.auth.machinename').show);
  t.is(h.authSys.uid, num(field(g.nodes, 'rpc.auth.uid')));
  t.is(h.authSys.gid, num(field(g.nodes, 'rpc.auth.gid')));
  const gids = g.nodes.find((n) => /^Auxiliary GIDs \(\d+\)$/.test(n.show));
  t.is(h.authSys.gidCount, Number(gids?.show.match(/\((\d+)\)/)?.[1]));
  // The NFS arguments start at the file handle's length word.
  const nfs = proto(g.nodes, 'nfs');
  t.is(h.bodyOffset, nfs.pos - g.base);
  t.is(h.body.readUInt32BE(0), field(g.nodes, 'nfs.fhandle').size);
  t.is(field(g.nodes, 'nfs.fhandle').pos - g.base, h.bodyOffset + 4);
  // The decoded credential and machine name are views into the record, so the decoder copied nothing.
  t.is(h.cred.body.buffer, g.record.buffer);
});

test('NFSv3 READ reply from ganesha: SUCCESS, and the results start where tshark starts NFS', (t) => {
  const g = load('nfs3-read-reply');
  const h = new RpcReplyHeader().decode(g.record);
  t.is(h.xid, Number(field(g.nodes, 'rpc.xid').show));
  t.is(h.replyStat, num(field(g.nodes, 'rpc.replystat')));
  t.is(h.acceptStat, num(field(g.nodes, 'rpc.state_accept')));
  t.is(h.verf.flavor, num(field(g.nodes, 'rpc.auth.flavor')));
  const nfs = proto(g.nodes, 'nfs');
  t.is(h.bodyOffset, nfs.pos - g.base);
  t.is(h.body.length, nfs.size);
  // The READ data ends the message; its last bytes are the file's text followed by the XDR pad.
  t.true(h.body.includes(Buffer.from('golden bytes for the rpcrdma-gateway RPC codec tests\n')));
});

test('the call and reply of each capture carry the same xid', (t) => {
  for (const [call, reply] of [
    ['rpcinfo-null-call', 'rpcinfo-null-reply'],
    ['nfs3-read-call', 'nfs3-read-reply'],
  ]) {
    t.is(
      new RpcCallHeader().decode(load(call).record).xid,
      new RpcReplyHeader().decode(load(reply).record).xid,
    );
  }
});
