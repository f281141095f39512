/**
 * GC reachability of the native provider's wrappers, without a device. The addon keeps each object's JS
 * callback in a strong reference (a GC root) while the native object lives; a callback that captured
 * its TypeScript wrapper would make a cycle through that root, and an object dropped without destroy()
 * would never reach its finalizer (docs/native-provider.md: "released ... by the GC finalizer"). The
 * addon's testing `EventSource` has exactly that shape (a native object holding its callback strongly),
 * so it stands in for the native CQ, context and CM channel behind the real TypeScript classes.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type {
  EventSource,
  NativeCmEvent,
  NativeCmId,
  NativeContext,
  NativeCq,
  RdmaNativeAddon,
} from '../../rdma-backend/providers/native/addon.js';
import { NativeCompletionQueue } from '../../rdma-backend/providers/native/cq.js';
import { NativeDevice } from '../../rdma-backend/providers/native/device.js';
import { CmEventType, type ConnectRequest } from '../../rdma-backend/verbs/index.js';
import { addonTest, fakeDeviceAttrs, requireAddon } from './native-helpers.js';

const test = addonTest();

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collects until `done()` (finalizers of wrapped objects run after a GC, sometimes on a later turn). */
async function collect(done: () => boolean): Promise<void> {
  for (let i = 0; i < 30 && !done(); i++) {
    gc();
    await new Promise((r) => setTimeout(r, 5));
  }
}

const attrs = fakeDeviceAttrs('fake0');

let nextCqId = 1;

/** A context whose CQs and async-event watcher are EventSources holding their callbacks strongly. */
function fakeContext(a: RdmaNativeAddon): NativeContext {
  const ctx = {
    query: () => attrs,
    createCq: (cqe: number, _words: Uint32Array, onWake: (count: number) => void) =>
      Object.assign(new a.testing.EventSource(new Uint32Array(4), onWake), {
        id: nextCqId++,
        cqe,
        poll: () => 0,
        arm: () => {},
      }) as unknown as NativeCq,
    watchAsyncEvents: (onEvent: (type: number, element: number) => void) => {
      // As the native Context: it keeps the watcher's callback for as long as it lives.
      const source = new a.testing.EventSource(new Uint32Array(4), (n) => onEvent(n, 0));
      source.setRef(false); // as the native watcher: it does not keep the process alive
      (ctx as { async?: EventSource }).async = source;
    },
    close: () => {},
  };
  return ctx as unknown as NativeContext;
}

test.serial('a CQ dropped without destroy() reaches the finalizer of its native CQ', async (t) => {
  const a = requireAddon();
  const ctx = fakeContext(a);
  const before = a.testing.liveResources();
  (() => {
    for (let i = 0; i < 10; i++) new NativeCompletionQueue(a, ctx, 16);
  })();
  t.is(a.testing.liveResources(), before + 10);
  await collect(() => a.testing.liveResources() === before);
  t.is(a.testing.liveResources(), before, 'every native CQ finalized');
});

test.serial('a CQ still referenced still wakes its notify handler', async (t) => {
  const a = requireAddon();
  let native: EventSource | undefined;
  const ctx = fakeContext(a);
  const create = ctx.createCq.bind(ctx);
  ctx.createCq = (cqe, words, onWake) => {
    const cq = create(cqe, words, onWake);
    native = cq as unknown as EventSource;
    return cq;
  };
  const cq = new NativeCompletionQueue(a, ctx, 16);
  let wakes = 0;
  cq.setNotifyHandler(() => wakes++);
  await collect(() => false);
  native!.signal(1);
  await collect(() => wakes > 0);
  t.is(wakes, 1);
  cq.destroy();
});

test.serial('an idle device dropped without close() releases its context and CQs', async (t) => {
  const a = requireAddon();
  const before = a.testing.liveResources();
  (() => {
    const dev = new NativeDevice(a, fakeContext(a), 'fake0');
    dev.createCq(16);
    dev.createCq(16);
  })();
  t.is(a.testing.liveResources(), before + 3, 'async watcher + 2 CQs');
  await collect(() => a.testing.liveResources() === before);
  t.is(a.testing.liveResources(), before);
});

test.serial('a device with a listener stays alive without references, and its events arrive', async (t) => {
  const a = requireAddon();
  const queue: NativeCmEvent[] = [];
  let channel: EventSource | undefined;
  const listenId = {
    bindAddr: () => {},
    listen: () => {},
    addresses: () => ({ local: { address: '192.0.2.2', port: 20049, family: 'IPv4' } }),
    destroy: () => {},
  } as unknown as NativeCmId;
  const addon = {
    ...a,
    createCmChannel: (onEvents: (events: NativeCmEvent[]) => void) => {
      channel = new a.testing.EventSource(new Uint32Array(4), () => onEvents(queue.splice(0)));
      return Object.assign(channel, { createId: () => listenId });
    },
  } as unknown as RdmaNativeAddon;
  const requests: ConnectRequest[] = [];
  const listener = await (async () => {
    const dev = new NativeDevice(addon, fakeContext(a), 'fake0');
    const l = await dev.listen({ host: '192.0.2.2', port: 20049, onConnectRequest: (r) => requests.push(r) });
    return new WeakRef(l);
  })();
  await collect(() => false);
  t.truthy(listener.deref(), 'the listening device (and its listener) survived the GC');
  queue.push({
    type: CmEventType.CONNECT_REQUEST,
    status: 0,
    listenId,
    id: { addresses: () => ({}), reject: () => {}, destroy: () => {} } as unknown as NativeCmId,
  });
  channel!.signal(1);
  await collect(() => requests.length > 0);
  t.is(requests.length, 1, 'the connect request reached the listener');
  requests[0].reject();
  await listener.deref()?.close();
  channel!.destroy();
});
