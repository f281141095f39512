/**
 * Version 2 golden vectors, written by hand from the XDR of seed 004 §6.3–6.4 and the extension mapping
 * of DESIGN.md §3 (one commented word per line). Each vector is decoded and re-encoded byte for byte.
 */
import test from 'ava';
import {
  applyProperties,
  decodeHeader,
  encodeVersError,
  HeaderDecoder,
  headerSize,
  type RpcRdmaHeaderInput,
  type V2ConnProp,
  type V2Header,
} from '../../rdma-backend/protocol/index.js';
import { XdrWriter } from '../../rpc/xdr.js';
import { encodeToBuffer, hex } from './hex.js';

const encode = (h: RpcRdmaHeaderInput): Buffer => encodeToBuffer(h);

/** Decodes, re-encodes and checks the exact size; returns the decoded header. */
function roundTrip(t: import('ava').ExecutionContext, bytes: Buffer, headerLength = bytes.length): V2Header {
  const h = decodeHeader(bytes) as V2Header;
  t.is(h.version, 2);
  t.deepEqual(encode(h as RpcRdmaHeaderInput), bytes.subarray(0, headerLength));
  t.is(headerSize(h as RpcRdmaHeaderInput), headerLength);
  return h;
}

// A typical READ Call: RDMA2_MSG, one Write chunk of one segment, the RPC Call follows inline.
const READ_CALL = hex(
  '12345678', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000080', // rdma_credit = 128 (request)
  '00000000', // rdma_htype = RDMA2_MSG
  '00000000', // rdma_flags = 0 (a Call: RPCRDMA2_F_RESPONSE clear)
  '0000c001', // rdma_inv_handle = the write segment's handle
  '00000000', // rdma_reads: end
  '00000001', // rdma_writes: chunk present
  '00000001', //   segment count = 1
  '0000c001', //   handle
  '00100000', //   length = 1 MiB
  'ff000000', //   offset high (offset above 2^53)
  '00001000', //   offset low
  '00000000', // rdma_writes: end
  '00000000', // rdma_reply: absent
  '12345678', // RPC Call: xid (rdma_rpc_first_word)
);

test('RDMA2_MSG: a READ Call with one Write chunk', (t) => {
  const h = roundTrip(t, READ_CALL, READ_CALL.length - 4);
  t.deepEqual(h, {
    version: 2,
    htype: 0,
    xid: 0x12345678,
    credit: 128,
    flags: 0,
    payloadOffset: 60,
    invHandle: 0xc001,
    chunks: {
      reads: [],
      writes: [[{ handle: 0xc001, length: 0x100000, offset: 0xff00000000001000n }]],
      reply: null,
    },
  });
});

// A Long Reply: RDMA2_NOMSG with the Reply chunk showing the bytes written; F_RESPONSE set.
const LONG_REPLY = hex(
  '00000021', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000040', // rdma_credit = 64 (grant)
  '00000001', // rdma_htype = RDMA2_NOMSG
  '00000001', // rdma_flags = RPCRDMA2_F_RESPONSE
  '00000000', // rdma_inv_handle = 0
  '00000001', // rdma_reads: present (a responder-provided Read chunk, seed 002)
  '00000000', //   position = 0
  '0000d001', //   handle
  '00003000', //   length = 12288
  '00000000', //   offset high
  '00010000', //   offset low
  '00000000', // rdma_reads: end
  '00000000', // rdma_writes: end
  '00000001', // rdma_reply: present
  '00000002', //   segment count = 2
  '0000e001', //   handle
  '00001000', //   length = 4096
  '00000000', //   offset high
  '00020000', //   offset low
  '0000e002', //   handle
  '00000123', //   length = 291
  '80000000', //   offset high (2^63)
  '00000000', //   offset low
);

test('RDMA2_NOMSG with a Read chunk and a Reply chunk', (t) => {
  const h = roundTrip(t, LONG_REPLY);
  t.deepEqual(h, {
    version: 2,
    htype: 1,
    xid: 0x21,
    credit: 64,
    flags: 1,
    payloadOffset: LONG_REPLY.length,
    invHandle: 0,
    chunks: {
      reads: [{ handle: 0xd001, length: 0x3000, offset: 0x10000n, position: 0 }],
      writes: [],
      reply: [
        { handle: 0xe001, length: 4096, offset: 0x20000n },
        { handle: 0xe002, length: 0x123, offset: 0x8000000000000000n },
      ],
    },
  });
});

test('reserved rdma_flags bits are reported, and the encoder refuses to send them', (t) => {
  const bytes = Buffer.from(READ_CALL);
  bytes.writeUInt32BE(0x80000001, 16); // rdma_flags = reserved bit 31 + F_RESPONSE
  const h = decodeHeader(bytes) as V2Header;
  t.is(h.flags, 0x80000001);
  t.throws(() => encode(h as RpcRdmaHeaderInput), { code: 'ERR_RPCRDMA_FLAGS' });
});

/** The prefix of an RDMA2_ERROR with xid 0x31, credit 16, F_RESPONSE set. */
const ERROR_PREFIX = [
  '00000031', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000010', // rdma_credit = 16
  '00000004', // rdma_htype = RDMA2_ERROR
  '00000001', // rdma_flags = RPCRDMA2_F_RESPONSE (MUST be set on RDMA2_ERROR, §3.2)
];

const ERROR_ARMS: [string, Buffer, object][] = [
  [
    'RDMA2_ERR_VERS with its range',
    hex(...ERROR_PREFIX, '00000001', '00000001', '00000002'), // err, low 1, high 2
    { code: 1, versLow: 1, versHigh: 2 },
  ],
  ['RDMA2_ERR_BAD_XDR (void)', hex(...ERROR_PREFIX, '00000002'), { code: 2 }],
  ['RDMA2_ERR_INVAL_HTYPE (void)', hex(...ERROR_PREFIX, '00000003'), { code: 3 }],
  [
    'RDMA2_ERR_READ_CHUNKS with max chunks',
    hex(...ERROR_PREFIX, '00000004', '00000000'), // err, rdma_max_chunks = 0
    { code: 4, maxChunks: 0 },
  ],
  [
    'RDMA2_ERR_WRITE_CHUNKS with max chunks',
    hex(...ERROR_PREFIX, '00000005', '00000003'), // err, rdma_max_chunks = 3
    { code: 5, maxChunks: 3 },
  ],
  [
    'RDMA2_ERR_SEGMENTS with max segments',
    hex(...ERROR_PREFIX, '00000006', '00000010'), // err, rdma_max_segments = 16
    { code: 6, maxSegments: 16 },
  ],
  [
    'RDMA2_ERR_WRITE_RESOURCE with index and length',
    hex(...ERROR_PREFIX, '00000007', '00000001', '00020000'), // err, chunk index 1, length needed 128 KiB
    { code: 7, chunkIndex: 1, lengthNeeded: 0x20000 },
  ],
  [
    'RDMA2_ERR_REPLY_RESOURCE with length',
    hex(...ERROR_PREFIX, '00000008', '00002345'), // err, length needed
    { code: 8, lengthNeeded: 0x2345 },
  ],
  ['RDMA2_ERR_SYSTEM (void)', hex(...ERROR_PREFIX, '00000009'), { code: 9 }],
  ['an unknown error code takes the void arm', hex(...ERROR_PREFIX, '0000002a'), { code: 42 }],
];

for (const [name, bytes, error] of ERROR_ARMS) {
  test(`RDMA2_ERROR: ${name}`, (t) => {
    const h = roundTrip(t, bytes);
    t.deepEqual(h, {
      version: 2,
      htype: 4,
      xid: 0x31,
      credit: 16,
      flags: 1,
      payloadOffset: bytes.length,
      error,
    });
  });
}

test('RDMA2_ERROR is always encoded with RPCRDMA2_F_RESPONSE', (t) => {
  const out = encode({ version: 2, htype: 4, xid: 0x31, credit: 16, error: { code: 9 } });
  t.deepEqual(out, ERROR_ARMS[8][1]);
});

test('a Version 1 ERR_VERS layout echoing rdma_vers 2 (what Linux sends) is understood', (t) => {
  const legacy = hex(
    '00000031', // rdma_xid
    '00000002', // rdma_vers = 2 (echoed by a Version 1 peer)
    '00000001', // rdma_credit
    '00000004', // rdma_proc = RDMA_ERROR
    '00000001', // rdma_err = ERR_VERS (no rdma_flags word: Version 1 layout)
    '00000001', // rdma_vers_low = 1
    '00000001', // rdma_vers_high = 1
  );
  const h = decodeHeader(legacy);
  t.like(h, { version: 2, htype: 4, legacyLayout: true, error: { code: 1, versLow: 1, versHigh: 1 } });
  // And encodeVersError writes exactly that form.
  const w = new XdrWriter(32);
  encodeVersError(w, 0x31, 2, 1, 1, 1);
  t.deepEqual(w.toBuffer(), legacy);
});

// RDMA2_CONNPROP: RBSIZ 8192, BRS with zero-length data (= default), an unknown property 99.
const CONNPROP = hex(
  '00000000', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000001', // rdma_credit = 1
  '00000005', // rdma_htype = RDMA2_CONNPROP
  '00000000', // rdma_flags
  '00000003', // rdma_props: 3 entries
  '00000001', //   rdma_which = RDMA2_PROPID_RBSIZ
  '00000004', //   rdma_data length = 4
  '00002000', //   rpcrdma2_prop_rbsiz = 8192
  '00000002', //   rdma_which = RDMA2_PROPID_BRS
  '00000000', //   rdma_data length = 0 → the default (INLINE)
  '00000063', //   rdma_which = 99 (unknown: skipped)
  '00000003', //   rdma_data length = 3
  'abcdef00', //   3 bytes + 1 pad byte
);

test('RDMA2_CONNPROP: typed values, zero-length default, unknown id skipped', (t) => {
  const h = roundTrip(t, CONNPROP) as V2ConnProp;
  t.is(h.props.length, 3);
  t.like(h.props[0], { id: 1, known: true, value: 8192, isDefault: false });
  t.like(h.props[1], { id: 2, known: true, value: 1, isDefault: true });
  t.like(h.props[2], { id: 99, known: false, value: undefined, isDefault: false });
  t.deepEqual([...h.props[2].data], [0xab, 0xcd, 0xef]);
  t.deepEqual(applyProperties(h.props), { rbsiz: 8192, brs: 1, reqreminv: false, rprc: false });
});

test('RDMA2_CONNPROP encoded from typed values', (t) => {
  const out = encode({
    version: 2,
    htype: 5,
    xid: 0,
    credit: 1,
    props: [
      { id: 1, value: 8192 },
      { id: 2 }, // default: zero-length rdma_data
      { id: 99, value: Buffer.from([0xab, 0xcd, 0xef]) },
    ],
  });
  t.deepEqual(out, CONNPROP);
});

// RDMA2_REQPROP (6): ask for RBSIZ 64 KiB and REQREMINV true.
const REQPROP = hex(
  '00000041', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000001', // rdma_credit
  '00000006', // rdma_htype = RDMA2_REQPROP
  '00000000', // rdma_flags
  '00000002', // rdma_want: 2 entries
  '00000001', //   RBSIZ
  '00000004', //   length 4
  '00010000', //   65536
  '00000003', //   REQREMINV
  '00000004', //   length 4
  '00000001', //   TRUE
);

test('RDMA2_REQPROP', (t) => {
  const h = roundTrip(t, REQPROP);
  t.like(h, { htype: 6, xid: 0x41 });
  if (h.htype !== 6) return;
  t.deepEqual(
    h.want.map((p) => [p.id, p.value]),
    [
      [1, 65536],
      [3, true],
    ],
  );
  t.deepEqual(
    encode({
      version: 2,
      htype: 6,
      xid: 0x41,
      credit: 1,
      want: [
        { id: 1, value: 65536 },
        { id: 3, value: true },
      ],
    }),
    REQPROP,
  );
});

// RDMA2_RESPPROP (7): entry 0 done, entry 1 rejected, entry 33 pending (word 1 bit 1), same xid.
const RESPPROP = hex(
  '00000041', // rdma_xid (the REQPROP's)
  '00000002', // rdma_vers = 2
  '00000001', // rdma_credit
  '00000007', // rdma_htype = RDMA2_RESPPROP
  '00000001', // rdma_flags = F_RESPONSE (answers our xid)
  '00000001', // done: 1 word
  '00000001', //   bit 0
  '00000001', // rejected: 1 word
  '00000002', //   bit 1
  '00000002', // pending: 2 words
  '00000000', //   word 0
  '00000002', //   word 1, bit 1 → entry 33
);

test('RDMA2_RESPPROP', (t) => {
  const h = roundTrip(t, RESPPROP);
  t.deepEqual(h, {
    version: 2,
    htype: 7,
    xid: 0x41,
    credit: 1,
    flags: 1,
    payloadOffset: RESPPROP.length,
    done: [1],
    rejected: [2],
    pending: [0, 2],
  });
});

// RDMA2_UPDPROP (8): RBSIZ now 16384, pending request cleared.
const UPDPROP = hex(
  '00000050', // rdma_xid
  '00000002', // rdma_vers = 2
  '00000001', // rdma_credit
  '00000008', // rdma_htype = RDMA2_UPDPROP
  '00000000', // rdma_flags
  '00000001', // rdma_now.rdma_which = RBSIZ
  '00000004', // rdma_now.rdma_data length
  '00004000', //   16384
  '00000001', // rdma_pendclr = TRUE
);

test('RDMA2_UPDPROP', (t) => {
  const h = roundTrip(t, UPDPROP);
  t.like(h, { htype: 8, pendingCleared: true, now: { id: 1, value: 16384, known: true } });
  t.deepEqual(
    encode({
      version: 2,
      htype: 8,
      xid: 0x50,
      credit: 1,
      now: { id: 1, value: 16384 },
      pendingCleared: true,
    }),
    UPDPROP,
  );
});

// RDMA2_DONE (3): the prefix only.
const DONE = hex(
  '00000060', // rdma_xid (of the Reply whose Read chunk was pulled)
  '00000002', // rdma_vers = 2
  '00000000', // rdma_credit
  '00000003', // rdma_htype = RDMA2_DONE
  '00000000', // rdma_flags
);

test('RDMA2_DONE', (t) => {
  const h = roundTrip(t, DONE);
  t.deepEqual(h, { version: 2, htype: 3, xid: 0x60, credit: 0, flags: 0, payloadOffset: 20 });
});

test('with extensions off, the optional header types are RDMA2_ERR_INVAL_HTYPE', (t) => {
  const dec = new HeaderDecoder({ extensions: false });
  for (const bytes of [DONE, REQPROP, RESPPROP, UPDPROP]) {
    const err = t.throws(() => dec.decode(bytes));
    t.like(err, { code: 'ERR_RPCRDMA_INVAL_HTYPE', reply: { code: 3 } });
  }
  t.notThrows(() => dec.decode(CONNPROP));
});
