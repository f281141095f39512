/**
 * Opening one device twice in a process (the gateway with the native provider and an embedded peer)
 * with a stand-in addon that behaves as the real one does: every openDevice() returns a new Context over
 * librdmacm's one process-global ibv_context, so a second watcher on its async_fd fails with EEXIST
 * (uv_poll_init), as on hardware.
 */
import test from 'ava';
import type { NativeContext, RdmaNativeAddon } from '../../rdma-backend/providers/native/addon.js';
import { createNativeProvider } from '../../rdma-backend/providers/native/index.js';
import { FAKE_LAYOUT, fakeDeviceAttrs } from './native-helpers.js';

const attrs = fakeDeviceAttrs('rxe0');

let cqIds = 0;

function standIn() {
  const s = {
    opened: 0,
    closed: 0,
    watcher: undefined as ((type: number, element: number) => void) | undefined,
  };
  const addon = {
    layout: FAKE_LAYOUT,
    listDevices: () => [{ name: 'rxe0', nodeType: 1, transportType: 0, guid: '0' }],
    openDevice: (): NativeContext => {
      s.opened++;
      let mine = false;
      return {
        name: () => 'rxe0',
        query: () => attrs,
        createCq: (cqe: number) => ({ id: ++cqIds, cqe, poll: () => 0, arm() {}, setRef() {}, destroy() {} }),
        watchAsyncEvents: (cb: (type: number, element: number) => void) => {
          if (s.watcher)
            throw Object.assign(new Error('uv_poll_init: File exists (EEXIST)'), {
              code: 'EEXIST',
              errno: 17,
              syscall: 'uv_poll_init',
            });
          s.watcher = cb;
          mine = true;
        },
        close: () => {
          s.closed++;
          if (mine) s.watcher = undefined;
        },
      } as unknown as NativeContext;
    },
  } as unknown as RdmaNativeAddon;
  return { s, addon };
}

test('the same device opened twice shares one context, closed with the last device', async (t) => {
  const { s, addon } = standIn();
  const provider = createNativeProvider({ addon });
  const a = await provider.openDevice('rxe0');
  const b = await provider.openDevice('rxe0');
  t.is(s.opened, 1, 'one native context');
  t.truthy(s.watcher, 'its async events are watched');
  a.close();
  t.is(s.closed, 0, 'still used by the second device');
  t.truthy(s.watcher);
  b.close();
  t.is(s.closed, 1);
  t.is(s.watcher, undefined);
  const c = await provider.openDevice('rxe0');
  t.is(s.opened, 2, 'opened afresh after the last close');
  c.close();
});

test('async events reach every device open on the context', async (t) => {
  const { s, addon } = standIn();
  const provider = createNativeProvider({ addon });
  const a = await provider.openDevice('rxe0');
  const b = await provider.openDevice('rxe0');
  // A CQ of each device; IBV_EVENT_CQ_ERR (0) naming it marks that CQ overrun, in either device.
  const cqA = a.createCq(4) as unknown as { overrun: boolean; native: { id: number } };
  const cqB = b.createCq(4) as unknown as { overrun: boolean; native: { id: number } };
  s.watcher!(0, cqB.native.id);
  s.watcher!(0, cqA.native.id);
  t.true(cqA.overrun);
  t.true(cqB.overrun);
  (cqA as unknown as { destroy(): void }).destroy();
  (cqB as unknown as { destroy(): void }).destroy();
  a.close();
  b.close();
});
