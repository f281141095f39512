/**
 * The property registry (seed 004 §4, DESIGN.md §3), subset bitmaps (seed 004 §4.1) and RFC 8797
 * connection private data.
 */
import test from 'ava';
import fc from 'fast-check';
import {
  applyProperties,
  createDefaultPropertyRegistry,
  DEFAULT_TRANSPORT_PROPERTIES,
  decodePrivateData,
  defaultPropertyRegistry,
  encodePrivateData,
  headerSize,
  type PropertyDefinition,
  subsetHas,
  subsetMembers,
  subsetOf,
} from '../../rdma-backend/protocol/index.js';
import { type XdrReader, XdrWriter } from '../../rpc/xdr.js';

test('defaults: RBSIZ 4096, BRS INLINE, REQREMINV and RPRC false', (t) => {
  t.deepEqual(DEFAULT_TRANSPORT_PROPERTIES, { rbsiz: 4096, brs: 1, reqreminv: false, rprc: false });
  t.deepEqual(defaultPropertyRegistry.ids().sort(), [1, 2, 3, 4]);
  t.deepEqual(applyProperties([]), DEFAULT_TRANSPORT_PROPERTIES);
});

test('registry encodes rdma_data with the property XDR type and its exact size', (t) => {
  const cases: [number, unknown, string][] = [
    [1, 8192, '0000000400002000'],
    [2, 2, '0000000400000002'],
    [3, true, '0000000400000001'],
    [4, false, '0000000400000000'],
    [1, undefined, '00000000'],
    [42, Buffer.from([1, 2, 3, 4, 5]), '000000050102030405000000'],
  ];
  for (const [id, value, hex] of cases) {
    const w = new XdrWriter(8);
    defaultPropertyRegistry.encodeData(w, id, value);
    t.is(w.view().toString('hex'), hex, `property ${id}`);
    t.is(defaultPropertyRegistry.dataSize(id, value), hex.length / 2);
  }
  t.throws(() => defaultPropertyRegistry.encodeData(new XdrWriter(), 2, 3), {
    code: 'ERR_RPCRDMA_PROP_VALUE',
  });
  t.throws(() => defaultPropertyRegistry.encodeData(new XdrWriter(), 3, 1), {
    code: 'ERR_RPCRDMA_PROP_VALUE',
  });
  t.throws(() => defaultPropertyRegistry.encodeData(new XdrWriter(), 42, 7), { code: 'ERR_RPCRDMA_PROP_ID' });
});

test('an extension property can be registered once, with its own type', (t) => {
  const reg = createDefaultPropertyRegistry();
  const pair: PropertyDefinition<[number, number]> = {
    id: 100,
    name: 'pair',
    defaultValue: [0, 0],
    decode: (r: XdrReader) => [r.u32('a'), r.u32('b')],
    encode: (w: XdrWriter, v) => {
      w.u32(v[0], 'a').u32(v[1], 'b');
    },
  };
  reg.register(pair);
  t.throws(() => reg.register(pair), { code: 'ERR_RPCRDMA_PROP_ID' });
  t.is(reg.dataSize(100, [1, 2]), 12);
  t.is(
    headerSize({ version: 2, htype: 5, xid: 0, credit: 1, props: [{ id: 100, value: [1, 2] }] }, reg),
    20 + 4 + 4 + 12,
  );
});

test('subsets: bit N mod 32 of word N div 32', (t) => {
  t.deepEqual(subsetOf([0, 2]), [0b101]);
  t.deepEqual(subsetOf([31]), [0x80000000]);
  t.deepEqual(subsetOf([33]), [0, 2]);
  t.true(subsetHas([0, 2], 33));
  t.false(subsetHas([0, 2], 1));
  t.false(subsetHas([0, 2], 64), 'words beyond the last are zero');
  t.throws(() => subsetOf([-1]), { code: 'ERR_RPCRDMA_SUBSET' });
  fc.assert(
    fc.property(fc.uniqueArray(fc.nat({ max: 200 }), { maxLength: 40 }), (idx) => {
      const s = subsetOf(idx);
      t.deepEqual(
        subsetMembers(s),
        [...idx].sort((a, b) => a - b),
      );
      for (const w of s) t.true(w >= 0 && w <= 0xffffffff);
    }),
    { numRuns: 200 },
  );
});

test('RFC 8797 private data: golden bytes', (t) => {
  const pd = encodePrivateData({ sendWithInvalidateOk: true, inlineSendSize: 4096, inlineRecvSize: 4096 });
  // magic f6ab0e18, version 1, flags I=1, send (4096>>10)-1 = 3, recv 3
  t.is(pd.toString('hex'), 'f6ab0e1801010303');
  t.deepEqual(decodePrivateData(pd), {
    sendWithInvalidateOk: true,
    inlineSendSize: 4096,
    inlineRecvSize: 4096,
    reservedFlags: 0,
  });
  const small = encodePrivateData({
    sendWithInvalidateOk: false,
    inlineSendSize: 1024,
    inlineRecvSize: 262144,
  });
  t.is(small.toString('hex'), 'f6ab0e18010000ff');
});

test('RFC 8797 private data: sizes round down to KiB and saturate at 256 KiB', (t) => {
  const pd = encodePrivateData({
    sendWithInvalidateOk: false,
    inlineSendSize: 1500,
    inlineRecvSize: 1 << 20,
  });
  t.is(pd[6], 0);
  t.is(pd[7], 255);
  t.throws(
    () => encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 512, inlineRecvSize: 1024 }),
    {
      code: 'ERR_RPCRDMA_PRIVATE_DATA',
    },
  );
  const out = Buffer.alloc(12);
  encodePrivateData({ sendWithInvalidateOk: false, inlineSendSize: 2048, inlineRecvSize: 2048 }, out, 4);
  t.is(out.subarray(4).toString('hex'), 'f6ab0e1801000101');
});

test('RFC 8797 private data that is not ours is ignored, never thrown on', (t) => {
  t.is(decodePrivateData(undefined), undefined);
  t.is(decodePrivateData(Buffer.from('f6ab0e180101', 'hex')), undefined, 'too short');
  t.is(decodePrivateData(Buffer.from('f6ab0e1901010303', 'hex')), undefined, 'other magic');
  t.is(decodePrivateData(Buffer.from('f6ab0e1802010303', 'hex')), undefined, 'unknown version');
  const withReserved = decodePrivateData(Buffer.from('f6ab0e1801fe0303ffff', 'hex'));
  t.like(withReserved, { sendWithInvalidateOk: false, reservedFlags: 0xfe, inlineSendSize: 4096 });
});
