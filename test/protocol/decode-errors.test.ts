/**
 * Every way a received header is refused, and the error body the receiver must answer with
 * (RFC 8166 §5 for Version 1, seed 004 §5.3.3 and §4.1 for Version 2).
 */
import test from 'ava';
import {
  decodeHeader,
  HeaderDecoder,
  RpcRdmaDecodeError,
  type RpcRdmaErrorBody,
} from '../../rdma-backend/protocol/index.js';
import { hex } from './hex.js';

function refuse(t: import('ava').ExecutionContext, bytes: Buffer, dec?: HeaderDecoder): RpcRdmaDecodeError {
  const err = t.throws(() => (dec ? dec.decode(bytes) : decodeHeader(bytes)), {
    instanceOf: RpcRdmaDecodeError,
  });
  return err as RpcRdmaDecodeError;
}

/** A Version 2 header prefix: xid 0x77, credit 8, the given htype, flags 0. */
function v2(htype: number, ...body: string[]): Buffer {
  return hex('00000077', '00000002', '00000008', htype.toString(16).padStart(8, '0'), '00000000', ...body);
}

function v1(proc: number, ...body: string[]): Buffer {
  return hex('00000066', '00000001', '00000008', proc.toString(16).padStart(8, '0'), ...body);
}

test('an unsupported version is ERR_VERS carrying our range, whatever follows', (t) => {
  const err = refuse(t, hex('00000005', '00000003', 'ffffffff', 'ffffffff'));
  t.is(err.code, 'ERR_RPCRDMA_VERS');
  t.deepEqual(err.reply, { code: 1, versLow: 1, versHigh: 2 });
  t.is(err.xid, 5);
  t.is(err.version, 3);
  t.is(err.htype, undefined, 'no field after rdma_vers was interpreted');
  t.is(err.field, 'rdma_vers');
});

test('a Version-1-only receiver answers a Version 2 header with ERR_VERS 1..1', (t) => {
  const dec = new HeaderDecoder({ versions: { low: 1, high: 1 } });
  const err = refuse(t, v2(0, '00000000', '00000000', '00000000', '00000000', '00000077'), dec);
  t.deepEqual(err.reply, { code: 1, versLow: 1, versHigh: 1 });
});

test('fewer than four words cannot be answered (no XID)', (t) => {
  const err = refuse(t, hex('00000001', '00000002', '0000'));
  t.is(err.code, 'ERR_RPCRDMA_SHORT');
  t.is(err.xid, undefined);
});

test('truncation inside the chunk lists: RDMA2_ERR_BAD_XDR / ERR_CHUNK', (t) => {
  const e2 = refuse(t, v2(1, '00000000', '00000001', '00000000'));
  t.is(e2.code, 'ERR_RPCRDMA_BAD_XDR');
  t.deepEqual(e2.reply, { code: 2 });
  t.is(e2.xid, 0x77);
  const e1 = refuse(t, v1(1, '00000001', '00000000', '00000001'));
  t.deepEqual(e1.reply, { code: 2 });
  t.is(e1.version, 1);
});

test('an optional-data discriminant other than 0 or 1 is BAD_XDR', (t) => {
  const err = refuse(t, v2(1, '00000000', '00000002', '00000000', '00000000'));
  t.deepEqual(err.reply, { code: 2 });
  t.is(err.offset, 24);
});

test('RDMA2_MSG without an RPC message is BAD_XDR (rdma_rpc_first_word)', (t) => {
  const err = refuse(t, v2(0, '00000000', '00000000', '00000000', '00000000'));
  t.is(err.field, 'rdma_rpc_first_word');
  t.deepEqual(err.reply, { code: 2 });
});

test('an unknown Version 2 header type is RDMA2_ERR_INVAL_HTYPE; Version 1 answers ERR_CHUNK', (t) => {
  t.deepEqual(refuse(t, v2(2)).reply, { code: 3 }, 'htype 2 (MSGP) does not exist in Version 2');
  t.deepEqual(refuse(t, v2(0x1000)).reply, { code: 3 });
  const e1 = refuse(t, v1(9));
  t.is(e1.code, 'ERR_RPCRDMA_INVAL_HTYPE');
  t.deepEqual(e1.reply, { code: 2 });
});

test('a hostile segment count is refused before any allocation: RDMA2_ERR_SEGMENTS with the limit', (t) => {
  const dec = new HeaderDecoder({ limits: { maxSegmentsPerChunk: 4 } });
  const err = refuse(t, v2(1, '00000000', '00000000', '00000001', 'ffffffff'), dec);
  t.is(err.code, 'ERR_RPCRDMA_SEGMENTS');
  t.deepEqual(err.reply, { code: 6, maxSegments: 4 });
  t.is(err.offset, 32);
  // Under the limit but more than the message holds: BAD_XDR.
  t.deepEqual(refuse(t, v2(1, '00000000', '00000000', '00000001', '00000004'), dec).reply, { code: 2 });
  // Version 1 has only ERR_CHUNK.
  t.deepEqual(refuse(t, v1(1, '00000000', '00000001', 'ffffffff'), dec).reply, { code: 2 });
});

function readEntry(position: number, handle: number): string[] {
  const p = position.toString(16).padStart(8, '0');
  const h = handle.toString(16).padStart(8, '0');
  return ['00000001', p, h, '00000010', '00000000', '00001000'];
}

test('too many Read chunks: RDMA2_ERR_READ_CHUNKS; too many segments in one: SEGMENTS', (t) => {
  const dec = new HeaderDecoder({ limits: { maxReadChunks: 2, maxSegmentsPerChunk: 2 } });
  const threeChunks = v2(
    1,
    '00000000',
    ...readEntry(4, 1),
    ...readEntry(8, 2),
    ...readEntry(12, 3),
    '00000000',
    '00000000',
    '00000000',
  );
  t.deepEqual(refuse(t, threeChunks, dec).reply, { code: 4, maxChunks: 2 });
  const threeSegments = v2(
    1,
    '00000000',
    ...readEntry(4, 1),
    ...readEntry(4, 2),
    ...readEntry(4, 3),
    '00000000',
    '00000000',
    '00000000',
  );
  t.deepEqual(refuse(t, threeSegments, dec).reply, { code: 6, maxSegments: 2 });
  const twoByTwo = v2(
    1,
    '00000000',
    ...readEntry(4, 1),
    ...readEntry(4, 2),
    ...readEntry(8, 3),
    ...readEntry(8, 4),
    '00000000',
    '00000000',
    '00000000',
  );
  t.is(dec.decode(twoByTwo).version, 2);
});

test('too many Write chunks: RDMA2_ERR_WRITE_CHUNKS', (t) => {
  const dec = new HeaderDecoder({ limits: { maxWriteChunks: 1 } });
  const chunk = ['00000001', '00000000'];
  const err = refuse(t, v2(1, '00000000', '00000000', ...chunk, ...chunk, '00000000', '00000000'), dec);
  t.deepEqual(err.reply, { code: 5, maxChunks: 1 });
});

const PROP_CASES: [string, string[], Partial<RpcRdmaErrorBody>][] = [
  ['RBSIZ with 2 bytes of data', ['00000001', '00000001', '00000002', '12340000'], { code: 2 }],
  [
    'RBSIZ with 8 bytes of data (trailing bytes)',
    ['00000001', '00000001', '00000008', '00001000', '00000000'],
    { code: 2 },
  ],
  ['BRS outside its enum', ['00000001', '00000002', '00000004', '00000007'], { code: 2 }],
  ['REQREMINV bool of 2', ['00000001', '00000003', '00000004', '00000002'], { code: 2 }],
  [
    'rdma_data running past the message (unknown id)',
    ['00000001', '00000063', '00000100', '00000000'],
    { code: 2 },
  ],
  ['a propset count the message cannot hold', ['00001000', '00000001'], { code: 2 }],
];

for (const [name, body, reply] of PROP_CASES) {
  test(`RDMA2_CONNPROP: ${name} is RDMA2_ERR_BAD_XDR`, (t) => {
    const err = refuse(t, v2(5, ...body));
    t.is(err.code, 'ERR_RPCRDMA_BAD_XDR');
    t.deepEqual(err.reply, reply);
  });
}

test('a propset above maxProperties is BAD_XDR even when it fits', (t) => {
  const dec = new HeaderDecoder({ limits: { maxProperties: 1 } });
  const err = refuse(t, v2(5, '00000002', '00000001', '00000000', '00000002', '00000000'), dec);
  t.deepEqual(err.reply, { code: 2 });
});

test('a RESPPROP subset above maxSubsetWords is BAD_XDR', (t) => {
  const err = refuse(t, v2(7, '00ffffff', '00000000', '00000000'));
  t.deepEqual(err.reply, { code: 2 });
});

test('the decoder refuses a window outside its buffer as a usage error, not a decode error', (t) => {
  t.throws(() => decodeHeader(Buffer.alloc(16), 8, 32), { code: 'ERR_RPCRDMA_WINDOW' });
});

// The decoder takes a message without chunks from its fixed words (`plainMessage`) and leaves anything
// else to the walk: its edges.

test('a Version-2-only receiver answers a chunkless Version 1 RDMA_MSG with ERR_VERS 2..2, as the walk does', (t) => {
  const dec = new HeaderDecoder({ versions: { low: 2, high: 2 } });
  const err = refuse(t, v1(0, '00000000', '00000000', '00000000', '00000099'), dec);
  t.is(err.code, 'ERR_RPCRDMA_VERS');
  t.deepEqual(err.reply, { code: 1, versLow: 2, versHigh: 2 });
  t.is(err.xid, 0x66);
});

test('a chunkless header decoded inside a larger buffer: the same fields, its payload offset from the window', (t) => {
  const msg = v2(0, '00001234', '00000000', '00000000', '00000000', 'abcdef01');
  const padded = Buffer.concat([Buffer.alloc(12, 0xee), msg, Buffer.alloc(8, 0xee)]);
  const dec = new HeaderDecoder();
  const alone = dec.decode(msg);
  const inside = dec.decode(padded, 12, 12 + msg.length);
  t.like(alone, {
    version: 2,
    htype: 0,
    xid: 0x77,
    credit: 8,
    flags: 0,
    invHandle: 0x1234,
    payloadOffset: 36,
  });
  t.deepEqual(inside, { ...alone, payloadOffset: 12 + 36 });
  t.deepEqual(inside.version === 2 && inside.htype === 0 ? inside.chunks : null, {
    reads: [],
    writes: [],
    reply: null,
  });
  // The window's end counts, not the buffer's: cut before the RPC message's first word, it is refused.
  const short = t.throws(() => dec.decode(padded, 12, 12 + 36), { instanceOf: RpcRdmaDecodeError });
  t.is(short?.field, 'rdma_rpc_first_word');
});

test('an RDMA2_NOMSG of exactly its 36 bytes decodes (it carries no RPC message); one word short does not', (t) => {
  const nomsg = v2(1, '00000000', '00000000', '00000000', '00000000');
  t.like(decodeHeader(nomsg), { version: 2, htype: 1, payloadOffset: 36 });
  t.deepEqual(refuse(t, nomsg.subarray(0, 32)).reply, { code: 2 });
});
