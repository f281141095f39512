/**
 * The native provider through the verbs interface on a machine without an RDMA device (CI's case):
 * it must say "no RDMA device", `auto` selection must fall back to soft, errors must map to the
 * interface's codes with advice where a setting is the fix, and work requests must reach the C++ parser
 * exactly as encoded.
 */

import type { NativeMr } from '../../rdma-backend/providers/native/addon.js';
import { memlockAdvice, toVerbsError } from '../../rdma-backend/providers/native/errors.js';
import {
  createNativeProvider,
  NativeUnavailableError,
  nativeAvailability,
} from '../../rdma-backend/providers/native/index.js';
import {
  NativeMemoryRegion,
  type NativeProtectionDomain,
} from '../../rdma-backend/providers/native/memory.js';
import { encodeRecvWr, encodeSendWr, NativeQueuePair } from '../../rdma-backend/providers/native/qp.js';
import { selectProvider } from '../../rdma-backend/providers/select.js';
import {
  type CompletionQueue,
  type ProtectionDomain,
  SendFlags,
  type SendWr,
  VerbsError,
  WrOpcode,
} from '../../rdma-backend/verbs/index.js';
import { addonTest, kernelHasRdmaDevice, requireAddon } from './native-helpers.js';

const test = addonTest();
const noDevice = !kernelHasRdmaDevice();
const noDeviceTest = noDevice ? test : test.skip;
if (!noDevice)
  process.stderr.write(
    '\n!!! an RDMA device exists: the "no RDMA device" tests are skipped; conformance.test runs instead\n\n',
  );

noDeviceTest('without a device the provider API reports "no RDMA device"', async (t) => {
  requireAddon();
  const provider = createNativeProvider();
  t.is(provider.name, 'native');
  const e = await t.throwsAsync(provider.openDevice(), { instanceOf: NativeUnavailableError });
  t.regex(e!.message, /^no RDMA device: /);
  t.is((e as NativeUnavailableError).reason, 'no-device');
  t.is((e as NativeUnavailableError).code, 'NATIVE_UNAVAILABLE');
  t.regex(e!.message, /rdma link add rxe0 type rxe netdev/, 'says how to get one');
  await t.throwsAsync(provider.listDevices(), {
    instanceOf: NativeUnavailableError,
    message: /^no RDMA device/,
  });
  const a = nativeAvailability();
  t.false(a.available);
  if (!a.available) {
    t.is(a.reason, 'no-device');
    t.regex(a.message, /^no RDMA device/);
  }
});

noDeviceTest('auto selects soft without a device; forcing native fails with the reason', (t) => {
  requireAddon();
  const auto = selectProvider('auto');
  t.is(auto.provider.name, 'soft');
  t.regex(auto.reason, /no RDMA device/);
  t.is(selectProvider('soft').provider.name, 'soft');
  t.throws(() => selectProvider('native'), {
    instanceOf: NativeUnavailableError,
    message: /^no RDMA device/,
  });
  t.throws(() => selectProvider('fast' as 'auto'), { message: /auto, native or soft/ });
});

test('a registration refused for RLIMIT_MEMLOCK says which limit and how to raise it', (t) => {
  const a = requireAddon();
  const native = a.testing.errnoError(12, 'ibv_reg_mr');
  const e = toVerbsError(native, 'registerMemory', {
    memlock: () => ({ soft: 8 * 2 ** 20, hard: 8 * 2 ** 20 }),
    bytes: 2 ** 24,
  });
  t.true(e instanceof VerbsError);
  t.is((e as VerbsError).code, 'VERBS_RESOURCE_LIMIT');
  t.regex(e.message, /RLIMIT_MEMLOCK is 8 MiB \(hard 8 MiB\)/);
  t.regex(e.message, /ulimit -l unlimited/);
  t.regex(e.message, /--ulimit memlock=-1:-1/);
  t.regex(e.message, /LimitMEMLOCK=infinity/);
  t.regex(memlockAdvice({ soft: Number.POSITIVE_INFINITY, hard: Number.POSITIVE_INFINITY }, 10), /unlimited/);
});

test('errno errors map to the interface codes', (t) => {
  const a = requireAddon();
  const map = (errno: number, call: string) =>
    (toVerbsError(a.testing.errnoError(errno, call), 'op') as VerbsError).code;
  t.is(map(12, 'ibv_post_send'), 'VERBS_QUEUE_FULL');
  t.is(map(12, 'ibv_post_recv'), 'VERBS_QUEUE_FULL');
  t.is(map(16, 'ibv_dealloc_pd'), 'VERBS_BUSY');
  t.is(map(22, 'rdma_connect'), 'VERBS_INVALID_ARGUMENT');
  t.is(map(98, 'rdma_bind_addr'), 'VERBS_ADDRESS');
  t.is(map(95, 'ibv_alloc_mw'), 'VERBS_UNSUPPORTED');
  t.is(map(5, 'ibv_query_device'), 'VERBS_NATIVE_FAILURE');
  const arg = (() => {
    try {
      a.allocBuffer(0);
    } catch (e) {
      return e;
    }
  })();
  t.is((toVerbsError(arg, 'allocBuffer') as VerbsError).code, 'VERBS_INVALID_ARGUMENT');
  const plain = new Error('x');
  t.is(toVerbsError(plain, 'op'), plain, 'foreign errors pass through');
});

/** A region object without a device: enough for encoding (address, lkey, length), all encoding reads. */
function fakeRegion(addr: number, lkey: number, length = 4096): NativeMemoryRegion {
  const native: NativeMr = { addr, lkey, rkey: lkey + 1, length, rereg() {}, destroy() {} };
  return new NativeMemoryRegion({} as NativeProtectionDomain, Buffer.alloc(length), 0, native);
}

test('every send work request kind reaches the C++ parser as encoded', (t) => {
  const a = requireAddon();
  const layout = a.layout;
  const mr = fakeRegion(0x7f12_3456_7000, 0x1234);
  const sg = [{ mr, offset: 16, length: 100 }];
  const eight = [{ mr, offset: 8, length: 8 }];
  const remoteAddr = 0x0000_7ffe_0000_1000n;
  const wrs: SendWr[] = [
    { wrId: 1, opcode: WrOpcode.SEND, flags: SendFlags.SIGNALED, sgList: sg },
    { wrId: 2 ** 40 + 3, opcode: WrOpcode.SEND, flags: SendFlags.SIGNALED | SendFlags.SOLICITED, sgList: [] },
    { wrId: 3, opcode: WrOpcode.SEND_WITH_INV, flags: 0, sgList: sg, invalidateRkey: 0xabcdef01 },
    { wrId: 4, opcode: WrOpcode.SEND_WITH_IMM, flags: 0, sgList: sg, immData: 0x01020304 },
    { wrId: 5, opcode: WrOpcode.RDMA_WRITE, flags: SendFlags.FENCE, sgList: sg, remoteAddr, rkey: 77 },
    { wrId: 6, opcode: WrOpcode.RDMA_WRITE_WITH_IMM, flags: 0, sgList: sg, remoteAddr, rkey: 78, immData: 9 },
    { wrId: 7, opcode: WrOpcode.RDMA_READ, flags: SendFlags.SIGNALED, sgList: sg, remoteAddr, rkey: 79 },
    { wrId: 8, opcode: WrOpcode.LOCAL_INV, flags: 0, sgList: [], invalidateRkey: 0x55 },
    { wrId: 9, opcode: WrOpcode.ATOMIC_FETCH_AND_ADD, flags: 0, sgList: eight, remoteAddr, rkey: 80 },
    { wrId: 10, opcode: WrOpcode.ATOMIC_CMP_AND_SWP, flags: 0, sgList: eight, remoteAddr, rkey: 81 },
  ];
  const words = new Uint32Array(wrs.length * layout.SEND_WR_STRIDE);
  for (const [i, wr] of wrs.entries()) encodeSendWr(words, i, wr, layout);
  const parsed = a.testing.parseSendWrs(words, 0, wrs.length, 4);
  t.is(parsed.length, wrs.length);
  wrs.forEach((wr, i) => {
    const p = parsed[i];
    t.is(p.wrId, BigInt(wr.wrId), `wrId ${i}`);
    t.is(p.opcode, wr.opcode);
    t.is(p.flags, wr.flags);
    t.is(p.numSge, wr.sgList.length);
    t.is(
      p.totalLength,
      wr.sgList.reduce((n, s) => n + s.length, 0),
    );
    t.is(p.remoteAddr, wr.remoteAddr === undefined ? 0 : Number(wr.remoteAddr));
    t.is(p.rkey, wr.rkey ?? 0);
    t.is(p.immOrInvRkey, wr.invalidateRkey ?? wr.immData ?? 0);
  });
  // A chain posted from the middle of the array
  t.deepEqual(
    a.testing.parseSendWrs(words, 4, 3, 4).map((p) => p.wrId),
    [5n, 6n, 7n],
  );
  const rw = new Uint32Array(2 * layout.RECV_WR_STRIDE);
  encodeRecvWr(rw, 0, { wrId: 11, sgList: sg }, layout);
  encodeRecvWr(rw, 1, { wrId: 12, sgList: [sg[0], sg[0], sg[0]] }, layout);
  t.deepEqual(a.testing.parseRecvWrs(rw, 0, 2, 4), [
    { wrId: 11n, numSge: 1, totalLength: 100 },
    { wrId: 12n, numSge: 3, totalLength: 300 },
  ]);
});

test('the C++ parser refuses malformed work requests, naming the request', (t) => {
  const a = requireAddon();
  const layout = a.layout;
  const mr = fakeRegion(0x10000, 1);
  const sg = (n: number, len = 8) => Array.from({ length: n }, () => ({ mr, offset: 0, length: len }));
  const words = new Uint32Array(layout.SEND_WR_STRIDE);
  const refuse = (wr: SendWr, maxSge: number, msg: RegExp) => {
    encodeSendWr(words, 0, wr, layout);
    const e = t.throws(() => a.testing.parseSendWrs(words, 0, 1, maxSge), { message: msg });
    t.is((e as { code?: string }).code, 'ERR_NATIVE_ARG');
  };
  refuse(
    { wrId: 1, opcode: WrOpcode.BIND_MW, flags: 0, sgList: [] },
    4,
    /work request 0: unsupported opcode 8/,
  );
  refuse({ wrId: 1, opcode: 42 as WrOpcode, flags: 0, sgList: [] }, 4, /unsupported opcode 42/);
  refuse({ wrId: 1, opcode: WrOpcode.SEND, flags: 1 << 7, sgList: [] }, 4, /unknown send flags/);
  refuse({ wrId: 1, opcode: WrOpcode.SEND, flags: 0, sgList: sg(3) }, 2, /numSge 3 exceeds the limit 2/);
  refuse({ wrId: 1, opcode: WrOpcode.LOCAL_INV, flags: 0, sgList: sg(1) }, 4, /LOCAL_INV carries no SGE/);
  refuse(
    { wrId: 1, opcode: WrOpcode.RDMA_READ, flags: SendFlags.INLINE, sgList: sg(1) },
    4,
    /cannot be INLINE/,
  );
  refuse(
    { wrId: 1, opcode: WrOpcode.ATOMIC_FETCH_AND_ADD, flags: 0, sgList: sg(1, 4), remoteAddr: 8n, rkey: 1 },
    4,
    /one 8-byte SGE/,
  );
  refuse(
    { wrId: 1, opcode: WrOpcode.ATOMIC_CMP_AND_SWP, flags: 0, sgList: sg(1), remoteAddr: 12n, rkey: 1 },
    4,
    /8-byte aligned/,
  );
  // Out-of-range records and counts
  t.throws(() => a.testing.parseSendWrs(words, 1, 1, 4), { message: /exceed the descriptor array/ });
  t.throws(() => a.testing.parseSendWrs(words, 0, 0, 4), { message: /count must be at least 1/ });
  t.throws(() => a.testing.parseSendWrs(words, 0, 2 ** 32, 4), { message: /integer in \[0, 2\^32\)/ });
  // The encoder refuses what cannot be represented before it reaches C++
  t.throws(() => encodeSendWr(words, 0, { wrId: -1, opcode: WrOpcode.SEND, flags: 0, sgList: [] }, layout), {
    instanceOf: VerbsError,
  });
  t.throws(
    () => encodeSendWr(words, 0, { wrId: 1, opcode: WrOpcode.SEND, flags: 0, sgList: sg(5) }, layout),
    {
      message: /at most 4 SGEs/,
    },
  );
});

test('an SGE outside its region is refused before it is encoded, INLINE or not', (t) => {
  const a = requireAddon();
  const layout = a.layout;
  const mr = fakeRegion(0x7f00_0000_0000, 7, 256);
  const words = new Uint32Array(layout.SEND_WR_STRIDE);
  const inline = (sgList: SendWr['sgList']): SendWr => ({
    wrId: 1,
    opcode: WrOpcode.SEND,
    flags: SendFlags.INLINE | SendFlags.SIGNALED,
    sgList,
  });
  // Up to the last byte, and an empty SGE at the end, are inside.
  for (const [offset, length] of [
    [0, 256],
    [255, 1],
    [256, 0],
  ]) {
    encodeSendWr(words, 0, inline([{ mr, offset, length }]), layout);
    t.is(a.testing.parseSendWrs(words, 0, 1, 4)[0].totalLength, length);
  }
  const bad: [number, number][] = [
    [0, 257], // one byte past the end: the provider would memcpy it from whatever follows the buffer
    [200, 100],
    [256, 1],
    [-1, 8],
    [0, -1],
    [0.5, 8],
    [0, 2 ** 32], // would wrap to 0 in the 32-bit length word
    [Number.NaN, 8],
  ];
  for (const [offset, length] of bad) {
    words.fill(0xdead);
    const e = t.throws(() => encodeSendWr(words, 0, inline([{ mr, offset, length }]), layout), {
      instanceOf: VerbsError,
      message: /an SGE must lie within its memory region/,
    });
    t.like(e, { code: 'VERBS_INVALID_ARGUMENT', details: { sge: 0, offset, length, regionLength: 256 } });
    t.true(
      words.every((w) => w === 0xdead),
      `nothing encoded for [${offset}, ${length}]`,
    );
  }
  // Every SGE is checked (the second here), on the send and the receive queue alike.
  t.throws(
    () =>
      encodeSendWr(
        words,
        0,
        inline([
          { mr, offset: 0, length: 8 },
          { mr, offset: 250, length: 8 },
        ]),
        layout,
      ),
    {
      instanceOf: VerbsError,
      message: /within its memory region/,
    },
  );
  t.throws(() => encodeSendWr(words, 0, { ...inline([{ mr, offset: 0, length: 300 }]), flags: 0 }, layout), {
    instanceOf: VerbsError,
  });
  t.throws(() => encodeRecvWr(words, 0, { wrId: 2, sgList: [{ mr, offset: 8, length: 256 }] }, layout), {
    instanceOf: VerbsError,
    message: /within its memory region/,
  });
  // A region re-keyed to a shorter window bounds its SGEs by that window.
  const short = fakeRegion(0x7f00_0001_0000, 8, 64);
  t.throws(() => encodeSendWr(words, 0, inline([{ mr: short, offset: 0, length: 65 }]), layout), {
    instanceOf: VerbsError,
  });
});

test('the queue pair refuses an out-of-bounds SGE in postSend and postRecv, even before it is connected', (t) => {
  const a = requireAddon();
  const layout = a.layout;
  const mr = fakeRegion(0x7f00_0002_0000, 9, 128);
  const cap = { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 2, maxRecvSge: 2, maxInlineData: 64 };
  const qp = new NativeQueuePair(
    layout,
    {} as ProtectionDomain,
    {} as CompletionQueue,
    {} as CompletionQueue,
    cap,
  );
  const e = t.throws(
    () =>
      qp.postSend({
        wrId: 1,
        opcode: WrOpcode.SEND,
        flags: SendFlags.INLINE,
        sgList: [{ mr, offset: 64, length: 65 }],
      }),
    { instanceOf: VerbsError },
  );
  t.is((e as VerbsError).code, 'VERBS_INVALID_ARGUMENT');
  t.throws(() => qp.postRecv({ wrId: 2, sgList: [{ mr, offset: 0, length: 129 }] }), {
    instanceOf: VerbsError,
  });
  // In bounds, the same work requests are accepted (kept until the QP exists).
  qp.postSend({
    wrId: 3,
    opcode: WrOpcode.SEND,
    flags: SendFlags.INLINE,
    sgList: [{ mr, offset: 64, length: 64 }],
  });
  qp.postRecv({ wrId: 4, sgList: [{ mr, offset: 0, length: 128 }] });
  qp.destroy();
});
