/**
 * Version 1 golden vectors, written by hand from the XDR of RFC 8166 §4.3 (one commented word per
 * line), checked in both directions: our decoder reads them, our encoder reproduces them byte for byte.
 */
import test from 'ava';
import {
  decodeHeader,
  headerSize,
  RpcRdmaDecodeError,
  type RpcRdmaHeaderInput,
  type V1Header,
} from '../../rdma-backend/protocol/index.js';
import { encodeToBuffer, hex } from './hex.js';

const encode = (h: RpcRdmaHeaderInput): Buffer => encodeToBuffer(h);

// RDMA_MSG carrying a Call with a Read chunk (two segments at XDR position 116), one Write chunk of two
// segments and a Reply chunk, offsets above 2^53.
const MSG = hex(
  '0000abcd', // rdma_xid
  '00000001', // rdma_vers = 1
  '00000080', // rdma_credit = 128
  '00000000', // rdma_proc = RDMA_MSG
  '00000001', // rdma_reads: entry present
  '00000074', //   position = 116
  '11223344', //   handle
  '00001000', //   length = 4096
  'ffeeddcc', //   offset (high word)
  'bbaa9988', //   offset (low word)
  '00000001', // rdma_reads: entry present
  '00000074', //   position = 116 (same Read chunk)
  '11223345', //   handle
  '00000200', //   length = 512
  '00200000', //   offset high: 0x0020000000000000 = 2^53
  '00000001', //   offset low  (2^53 + 1: not representable as a number)
  '00000000', // rdma_reads: end of list
  '00000001', // rdma_writes: chunk present
  '00000002', //   segment count = 2
  '0000a001', //   handle
  '00002000', //   length = 8192
  '00000000', //   offset high
  '10000000', //   offset low
  '0000a002', //   handle
  '00000800', //   length = 2048
  '00000001', //   offset high
  '00000000', //   offset low
  '00000000', // rdma_writes: end of list
  '00000001', // rdma_reply: present
  '00000001', //   segment count = 1
  '0000b001', //   handle
  '00000400', //   length = 1024
  'deadbeef', //   offset high
  '00000000', //   offset low
  '0000abcd', // RPC message: xid
  '00000000', // RPC message: msg_type CALL
);
const MSG_HEADER_LEN = MSG.length - 8;

test('RDMA_MSG with read, write and reply chunks', (t) => {
  const h = decodeHeader(MSG) as V1Header;
  t.deepEqual(h, {
    version: 1,
    proc: 0,
    xid: 0xabcd,
    credit: 128,
    payloadOffset: MSG_HEADER_LEN,
    chunks: {
      reads: [
        { handle: 0x11223344, length: 4096, offset: 0xffeeddccbbaa9988n, position: 116 },
        { handle: 0x11223345, length: 512, offset: 0x0020000000000001n, position: 116 },
      ],
      writes: [
        [
          { handle: 0xa001, length: 8192, offset: 0x10000000n },
          { handle: 0xa002, length: 2048, offset: 0x100000000n },
        ],
      ],
      reply: [{ handle: 0xb001, length: 1024, offset: 0xdeadbeef00000000n }],
    },
  });
  t.deepEqual(encode(h), MSG.subarray(0, MSG_HEADER_LEN));
  t.is(headerSize(h), MSG_HEADER_LEN);
});

// RDMA_NOMSG Long Call: one Position-Zero Read chunk of two segments.
const NOMSG = hex(
  '00000007', // rdma_xid
  '00000001', // rdma_vers = 1
  '00000020', // rdma_credit = 32
  '00000001', // rdma_proc = RDMA_NOMSG
  '00000001', // rdma_reads: present
  '00000000', //   position = 0
  '00000101', //   handle
  '00010000', //   length = 65536
  '00000000', //   offset high
  '00400000', //   offset low
  '00000001', // rdma_reads: present
  '00000000', //   position = 0
  '00000102', //   handle
  '00000010', //   length = 16
  '00000000', //   offset high
  '00500000', //   offset low
  '00000000', // rdma_reads: end
  '00000000', // rdma_writes: end
  '00000000', // rdma_reply: absent
);

test('RDMA_NOMSG with a Position-Zero Read chunk', (t) => {
  const h = decodeHeader(NOMSG);
  t.deepEqual(h, {
    version: 1,
    proc: 1,
    xid: 7,
    credit: 32,
    payloadOffset: NOMSG.length,
    chunks: {
      reads: [
        { handle: 0x101, length: 65536, offset: 0x400000n, position: 0 },
        { handle: 0x102, length: 16, offset: 0x500000n, position: 0 },
      ],
      writes: [],
      reply: null,
    },
  });
  t.deepEqual(encode(h as RpcRdmaHeaderInput), NOMSG);
});

const ERR_VERS_MSG = hex(
  '00000009', // rdma_xid
  '00000001', // rdma_vers = 1
  '00000001', // rdma_credit = 1
  '00000004', // rdma_proc = RDMA_ERROR
  '00000001', // rdma_err = ERR_VERS
  '00000001', // rdma_vers_low = 1
  '00000001', // rdma_vers_high = 1
);

test('RDMA_ERROR ERR_VERS', (t) => {
  const h = decodeHeader(ERR_VERS_MSG);
  t.deepEqual(h, {
    version: 1,
    proc: 4,
    xid: 9,
    credit: 1,
    payloadOffset: 28,
    error: { code: 1, versLow: 1, versHigh: 1 },
  });
  t.deepEqual(encode(h as RpcRdmaHeaderInput), ERR_VERS_MSG);
});

const ERR_CHUNK_MSG = hex(
  '0000000a', // rdma_xid
  '00000001', // rdma_vers = 1
  '00000040', // rdma_credit = 64
  '00000004', // rdma_proc = RDMA_ERROR
  '00000002', // rdma_err = ERR_CHUNK (void arm)
);

test('RDMA_ERROR ERR_CHUNK', (t) => {
  const h = decodeHeader(ERR_CHUNK_MSG);
  t.deepEqual(h, { version: 1, proc: 4, xid: 10, credit: 64, payloadOffset: 20, error: { code: 2 } });
  t.deepEqual(encode(h as RpcRdmaHeaderInput), ERR_CHUNK_MSG);
});

const DONE = hex(
  '0000000b', // rdma_xid
  '00000001', // rdma_vers = 1
  '00000000', // rdma_credit = 0
  '00000003', // rdma_proc = RDMA_DONE (void body)
);

test('RDMA_DONE', (t) => {
  const h = decodeHeader(DONE);
  t.deepEqual(h, { version: 1, proc: 3, xid: 11, credit: 0, payloadOffset: 16 });
  t.deepEqual(encode(h as RpcRdmaHeaderInput), DONE);
});

test('RDMA_MSGP is refused with ERR_CHUNK', (t) => {
  const msgp = hex(
    '0000000c', // rdma_xid
    '00000001', // rdma_vers = 1
    '00000001', // rdma_credit
    '00000002', // rdma_proc = RDMA_MSGP (deprecated)
    '00000004', // rdma_align
    '00000400', // rdma_thresh
    '00000000', // rdma_reads: end
    '00000000', // rdma_writes: end
    '00000000', // rdma_reply: absent
  );
  const err = t.throws(() => decodeHeader(msgp), { instanceOf: RpcRdmaDecodeError });
  t.is(err?.code, 'ERR_RPCRDMA_INVAL_HTYPE');
  t.deepEqual(err?.reply, { code: 2 });
  t.is(err?.xid, 12);
  t.is(err?.version, 1);
});

test('an unknown Version 1 error code is not valid XDR: ERR_CHUNK', (t) => {
  const bad = hex('0000000d', '00000001', '00000001', '00000004', '00000003');
  const err = t.throws(() => decodeHeader(bad), { instanceOf: RpcRdmaDecodeError });
  t.deepEqual(err?.reply, { code: 2 });
  t.is(err?.field, 'rdma_err');
  t.is(err?.offset, 16);
});

test('a Version 1 decoder window inside a larger buffer reports absolute payload offsets', (t) => {
  const framed = Buffer.concat([Buffer.alloc(6, 0xee), MSG, Buffer.alloc(3, 0xee)]);
  const h = decodeHeader(framed, 6, 6 + MSG.length);
  t.is(h.payloadOffset, 6 + MSG_HEADER_LEN);
  t.is(framed.readUInt32BE(h.payloadOffset), 0xabcd);
});

test('the Version 1 encoder refuses an error code the version cannot carry', (t) => {
  t.throws(() => encode({ version: 1, proc: 4, xid: 1, credit: 1, error: { code: 7 } }), {
    code: 'ERR_RPCRDMA_ERROR_BODY',
  });
});
