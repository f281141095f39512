/**
 * Scenario 6 through the gateway chain: what Wireshark makes of the gateway ↔ responder link (soft
 * iWARP). With Version 1 pinned (RFC 8166, which Wireshark 4.0's rpcordma dissector knows) the layers
 * decode as iwarp_mpa → iwarp_ddp_rdmap → rpcordma → rpc → nfs with good MPA CRCs, and the NFSv3 WRITE
 * and READ decode with their chunk data reassembled by Wireshark from the RDMA Read Responses / RDMA
 * Writes. With Version 2 Wireshark has no RPC-over-RDMA dissector, but MPA, DDP and RDMAP must be intact.
 */
import { execFile } from 'node:child_process';
import type { ExecutionContext } from 'ava';
import { TSHARK_TCP_PREFS, tsharkFields } from './harness/capture.js';
import { SIZES, sha256File, writeRandomFile } from './harness/checksum.js';
import { nfsCatSha256, nfsCopyIn, nfsCopyOut } from './harness/libnfs.js';
import type { Scenario, ScenarioContext } from './harness/scenario.js';

const NFS3_READ = '6';
/** NFSv4 READ operation (RFC 7530 §16.22). */
const NFS4_OP_READ = '25';
const NFS3_WRITE = '7';

/** Counts "Good CRC32" / "Bad CRC32" in tshark's verbose MPA trees (the field itself holds the value). */
function mpaCrcVerdicts(pcap: string): Promise<{ good: number; bad: number }> {
  return new Promise((resolve, reject) => {
    execFile(
      'tshark',
      ['-r', pcap, ...TSHARK_TCP_PREFS, '-Y', 'iwarp_mpa.crc_check', '-O', 'iwarp_mpa', '-V'],
      { encoding: 'utf8', maxBuffer: 256 << 20 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`tshark -V: ${stderr || err.message}`));
        resolve({
          good: stdout.match(/Good CRC32/g)?.length ?? 0,
          bad: stdout.match(/Bad CRC32|incorrect/gi)?.length ?? 0,
        });
      },
    );
  });
}

/** Writes, reads back (nfs-cp and nfs-cat, NFSv3) and NFSv4-reads one file of 1 MiB + 3 B; checksums. */
async function exerciseFile(ctx: ScenarioContext): Promise<number> {
  const size = SIZES.mibPlus;
  const local = ctx.session.path(ctx.session.freshName('decoded-local'));
  const sha = writeRandomFile(local, size);
  const name = ctx.session.freshName('decoded');
  await nfsCopyIn(local, ctx.endpoint, name, 3);
  const copy = ctx.session.path(ctx.session.freshName('decoded-back'));
  await nfsCopyOut(ctx.endpoint, name, copy, 3);
  ctx.t.is(await sha256File(copy), sha, 'nfs-cp v3 out');
  ctx.t.deepEqual(await nfsCatSha256(ctx.endpoint, name, 3), { sha256: sha, bytes: size }, 'nfs-cat v3');
  ctx.t.deepEqual(await nfsCatSha256(ctx.endpoint, name, 4), { sha256: sha, bytes: size }, 'nfs-cat v4');
  return size;
}

/** MPA start-up frames and CRCs: the layers every version must keep intact. */
async function checkMpaDdp(ctx: ScenarioContext, pcap: string): Promise<void> {
  const { t } = ctx;
  const requests = await tsharkFields(pcap, 'iwarp_mpa.req', ['iwarp_mpa.crc_flag', 'iwarp_mpa.rev']);
  const replies = await tsharkFields(pcap, 'iwarp_mpa.rep', ['iwarp_mpa.rej_flag']);
  t.true(requests.length >= 1, 'MPA Request frame decoded (capture started before the connection)');
  t.is(replies.length, requests.length, 'each MPA Request has its Reply');
  t.true(
    replies.every(([rej]) => rej.every((v) => v === '0' || v === 'False')),
    'no MPA Reply rejects',
  );
  const crc = await mpaCrcVerdicts(pcap);
  t.log(`${ctx.target.name} MPA CRC verdicts: ${JSON.stringify(crc)}`);
  t.true(crc.good > 10, 'MPA FPDUs carry CRCs Wireshark verifies as good');
  t.is(crc.bad, 0, 'no bad MPA CRC');
  const ddp = await tsharkFields(pcap, 'iwarp_ddp_rdmap', ['frame.number']);
  t.true(ddp.length > 10, 'DDP/RDMAP decoded');
  const broken = await tsharkFields(pcap, '(iwarp_mpa || iwarp_ddp_rdmap) && _ws.malformed', [
    'frame.number',
    '_ws.malformed',
  ]);
  // Which dissector threw is in the text ("[Malformed Packet: NFS]"). Upper layers may: Version 1 READ
  // replies are decoded once reduced (RFC 8166 §3.4.6: data removed, its length kept), before Wireshark
  // reassembles them, and NFS runs out of bytes there; Wireshark 4.0 reads a Version 2 header as Version 1.
  const lowerLayer = broken.filter(([, what]) => !what.some((w) => /NFS|RPCoRDMA|RPC\b/.test(w)));
  t.log(
    `${ctx.target.name}: ${broken.length} frames with an upper-layer decode error, ${lowerLayer.length} lower`,
  );
  t.deepEqual(lowerLayer, [], 'no malformed MPA/DDP/RDMAP frame');
}

/**
 * Wireshark flags "[Malformed Packet: NFS]" on the Version 1 frames that carry a READ reply with a Write
 * chunk. Each such frame holds the reply twice: first as sent, reduced (RFC 8166 §3.4.3: the opaque's
 * length word stays in the Payload stream, its contents travel in the Write chunk), which the NFS dissector
 * reads up to that length word and then runs out of bytes on; then reassembled with the chunk data, intact.
 * Checked frame by frame, so that a real fault (a missing length word, a reply decoded only once) fails.
 */
async function explainMalformedReadReplies(t: ExecutionContext, pcap: string): Promise<void> {
  const frames = await tsharkFields(pcap, 'rpcordma && _ws.malformed', [
    'frame.number',
    'rpc.msgtyp',
    'rpcordma.writes_count',
    'rpcordma.rdma_length',
    'rpc.opaque_length',
    'nfs.procedure_v3',
    'nfs.opcode',
  ]);
  for (const [frame, msgtyp, writes, chunkLengths, opaqueLengths, v3proc, v4ops] of frames) {
    const what = `frame ${frame[0]}`;
    t.true(
      msgtyp.filter((m) => m === '1').length >= 2,
      `${what}: the reply dissected twice, reduced and then reassembled (${msgtyp})`,
    );
    t.true(Number(writes[0]) >= 1, `${what}: the reply carries a Write list`);
    t.true(v3proc.includes(NFS3_READ) || v4ops.includes(NFS4_OP_READ), `${what}: a READ reply`);
    // The reduced reply's last word is the opaque length, equal to the bytes the responder wrote.
    t.true(
      chunkLengths.some((n) => opaqueLengths.includes(n)),
      `${what}: the length word stayed inline (${opaqueLengths}) for the chunk (${chunkLengths})`,
    );
  }
  t.log(
    `${frames.length} frames flagged malformed by Wireshark's NFS dissector: each a READ reply with a Write ` +
      'chunk, decoded first reduced (length word inline, data in the chunk) and then reassembled intact',
  );
}

/** (6, Version 1) iwarp_mpa → iwarp_ddp_rdmap → rpcordma → rpc → nfs, with chunks and reassembly. */
export const chainDecodeV1: Scenario = {
  id: '6-decode-v1',
  title: 'tshark decode of the RDMA link, Version 1: MPA/DDP/RDMAP/RPC-over-RDMA/RPC/NFS, chunks',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  capture: true,
  async run(ctx) {
    const { t } = ctx;
    const size = await exerciseFile(ctx);
    await ctx.capture!.stopComplete();
    const pcap = ctx.capture!.path;
    await checkMpaDdp(ctx, pcap);
    const stacked = await tsharkFields(pcap, 'iwarp_mpa && iwarp_ddp_rdmap && rpcordma && rpc && nfs', [
      'frame.protocols',
    ]);
    t.true(stacked.length > 0, 'frames decode through the whole stack');
    t.true(
      stacked.some(([p]) => /iwarp_mpa:iwarp_ddp_rdmap:rpcordma:rpc:nfs/.test(p.join('|'))),
      'frame.protocols shows the layers in order',
    );
    // Headers first: a call with a Read chunk is decoded as RPC only in the frame where Wireshark finishes
    // reassembling it from the RDMA Read Responses, which has no RPC-over-RDMA header of its own.
    const headers = await tsharkFields(pcap, 'rpcordma.msg_type', [
      'rpcordma.xid',
      'rpcordma.version',
      'rpcordma.reads_count',
      'rpcordma.writes_count',
      'rpcordma.reply_count',
    ]);
    /** xid → chunk list counts of the call (the first header with that xid) and of the reply. */
    const chunksByXid = new Map<string, { reads: number; writes: number; reply: number }[]>();
    for (const [xids, vers, reads, writes, reply] of headers) {
      t.deepEqual(vers, ['1'], 'RPC-over-RDMA Version 1 on the wire');
      const list = chunksByXid.get(xids[0]) ?? [];
      list.push({ reads: +reads[0], writes: +writes[0], reply: +reply[0] });
      chunksByXid.set(xids[0], list);
    }
    const rpcs = await tsharkFields(
      pcap,
      'rpc && nfs.procedure_v3 && (rpcordma || rpcordma.reassembled.length)',
      ['rpc.xid', 'rpc.msgtyp', 'nfs.procedure_v3', 'nfs.count3', 'rpcordma.reassembled.length'],
    );
    let writeCalls = 0;
    let writeBytes = 0;
    let reassembledWrites = 0;
    let writesInReadChunks = 0;
    let readCalls = 0;
    let readsWithWriteChunk = 0;
    let readBytes = 0;
    for (const [xid, type, proc, count, reasm] of rpcs) {
      const [call, reply] = chunksByXid.get(xid[0]) ?? [];
      t.truthy(call, `xid ${xid[0]} has an RPC-over-RDMA header with the same xid (RFC 8166 §4.1)`);
      if (type[0] === '0' && proc[0] === NFS3_WRITE) {
        writeCalls++;
        writeBytes += Number(count[0]);
        if (call?.reads) writesInReadChunks++;
        if (reasm.length > 0) reassembledWrites++;
      } else if (type[0] === '0' && proc[0] === NFS3_READ) {
        readCalls++;
        if (call?.writes === 1 && reply?.writes === 1) readsWithWriteChunk++;
      } else if (type.includes('1') && proc[0] === NFS3_READ) {
        readBytes += Number(count[0]); // READ3resok.count (the reply is decoded reduced, then reassembled)
      }
    }
    t.log(
      `${ctx.target.name} decode: ${headers.length} RPC-over-RDMA headers; NFSv3 WRITE calls ${writeCalls} ` +
        `(${writesInReadChunks} with a Read chunk, ${reassembledWrites} reassembled), READ calls ${readCalls} ` +
        `(${readsWithWriteChunk} with a Write chunk in call and reply), READ reply bytes ${readBytes}`,
    );
    t.true(writesInReadChunks >= 1, 'the 1 MiB WRITE carries its data in a Read chunk');
    t.true(reassembledWrites >= 1, 'Wireshark reassembled the WRITE call from the RDMA Read Responses');
    t.is(writeBytes, size, 'WRITE3args.count adds up to the file');
    t.true(readCalls >= 4, 'NFSv3 READ calls decoded (nfs-cp and nfs-cat, 1 MiB and 3 B each)');
    t.is(readsWithWriteChunk, readCalls, 'every READ offers a Write chunk and its reply uses it');
    t.is(readBytes, 2 * size, 'READ3resok.count of the replies adds up to two reads of the file');
    const longReplies = [...chunksByXid.values()].filter(([, r]) => r && r.reply > 0 && r.writes === 0);
    // READDIR / NFSv4 GETATTR-style replies of unknown size legitimately use a Reply chunk (RFC 8166 §3.5.4).
    t.log(`${longReplies.length} other replies came as Long Replies (Reply chunk, no Write chunk)`);
    await explainMalformedReadReplies(t, pcap);
  },
};

/** (6, Version 2) Wireshark 4.0 has no Version 2 dissector: MPA, DDP and RDMAP must still be intact. */
export const chainDecodeV2: Scenario = {
  id: '6-decode-v2',
  title: 'tshark decode of the RDMA link, Version 2: MPA/DDP/RDMAP intact, good CRCs',
  backendProtocols: [3, 4],
  rpcbind: 'running',
  capture: true,
  async run(ctx) {
    await exerciseFile(ctx);
    await ctx.capture!.stopComplete();
    const pcap = ctx.capture!.path;
    await checkMpaDdp(ctx, pcap);
    // RDMAP opcodes seen: Send (with Invalidate), RDMA Read Request / Response, RDMA Write.
    const ops = await tsharkFields(pcap, 'iwarp_rdma.opcode', ['iwarp_rdma.opcode']);
    const seen = new Set(ops.flatMap(([o]) => o));
    ctx.t.log(`${ctx.target.name} RDMAP opcodes: ${[...seen].sort().join(' ')}`);
    ctx.t.true(seen.size >= 3, 'Sends, RDMA Reads and RDMA Writes all decoded as RDMAP');
  },
};
