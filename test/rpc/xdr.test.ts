import test from 'ava';
import fc from 'fast-check';
import { XdrError, XdrReader, XdrWriter, xdrAlign, xdrPad } from '../../rpc/xdr.js';

test('pad and align follow RFC 4506 §4.10', (t) => {
  t.deepEqual([0, 1, 2, 3, 4, 5].map(xdrPad), [0, 3, 2, 1, 0, 3]);
  t.deepEqual([0, 1, 2, 3, 4, 5].map(xdrAlign), [0, 4, 4, 4, 4, 8]);
});

test('opaque round trip keeps bytes and zero pad', (t) => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 64 }), (data) => {
      const w = new XdrWriter(4);
      w.opaque(data);
      const out = w.view();
      t.is(out.length, 4 + xdrAlign(data.length));
      t.true(out.subarray(4 + data.length).every((b) => b === 0));
      const r = new XdrReader(out);
      t.deepEqual(new Uint8Array(r.opaque(1024, 'data')), data);
      t.is(r.remaining, 0);
    }),
  );
});

test('a truncated opaque raises ERR_XDR_SHORT naming the field and offset', (t) => {
  const buf = Buffer.from([0, 0, 0, 8, 1, 2, 3]);
  const err = t.throws(() => new XdrReader(buf).opaque(100, 'cred.body'), { instanceOf: XdrError });
  t.is(err?.code, 'ERR_XDR_SHORT');
  t.is(err?.field, 'cred.body');
  t.is(err?.offset, 0);
});
