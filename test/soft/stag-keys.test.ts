/**
 * The soft provider's STag keys (rdma-backend/providers/soft/memory.ts): the 8-bit key of an STag index
 * advances at every rekey and every reuse of the index, so a stale rkey names nothing again until 254 more
 * keys were given at that same index, whatever the other regions of the device do meanwhile.
 */
import test from 'ava';
import { createSoftProvider } from '../../rdma-backend/providers/soft/index.js';
import { Access } from '../../rdma-backend/verbs/index.js';

const REMOTE = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ;

test('a region rekeyed while other regions churn gets 255 distinct rkeys before its first comes back', async (t) => {
  const pd = (await createSoftProvider().openDevice()).allocPd();
  const region = pd.registerMemory(Buffer.alloc(64), REMOTE);
  const others = Array.from({ length: 8 }, () => pd.registerMemory(Buffer.alloc(64), REMOTE));
  const seen: number[] = [region.rkey];
  for (let i = 0; i < 254; i++) {
    // 254 keys given elsewhere between two rekeys of this region: a device-wide key counter would
    // come round to this region's previous key every time.
    for (let j = 0; j < 254; j++) others[j % others.length].rekey();
    region.rekey();
    seen.push(region.rkey);
  }
  t.is(new Set(seen).size, 255, 'no rkey repeated within 255 keys of the region');
  t.true(
    seen.every((k) => k >>> 8 === seen[0] >>> 8),
    'same index throughout',
  );
  region.rekey();
  t.is(region.rkey, seen[0], 'the 256th key is the first again: 8 bits, as on every RNIC');
});

test("a region that takes a deregistered region's index does not answer to its rkey", async (t) => {
  const pd = (await createSoftProvider().openDevice()).allocPd();
  const gone = pd.registerMemory(Buffer.alloc(64), REMOTE);
  const other = pd.registerMemory(Buffer.alloc(64), REMOTE);
  const staleRkey = gone.rkey;
  gone.deregister();
  // Keys given elsewhere first: with a device-wide counter, 253 more bring it back to the stale key.
  for (let j = 0; j < 253; j++) other.rekey();
  const next = pd.registerMemory(Buffer.alloc(64), REMOTE);
  t.is(next.rkey >>> 8, staleRkey >>> 8, 'the index was reused');
  t.not(next.rkey, staleRkey, 'but with the next key at that index');
});
