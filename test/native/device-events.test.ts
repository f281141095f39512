/**
 * The native provider's JavaScript side of connection management and CQ errors, on the paths that need
 * an RDMA device this machine does not have (CI's case too). Only the addon boundary is stood in for — an object with
 * the addon's shape, whose CM ids record what is done to them and whose event channel the test drives —
 * and NativeDevice / NativeConnection are the product's code. The addon's own behaviour is covered by
 * addon.test.ts and, with a device, conformance.test.ts.
 */

import test from 'ava';
import type {
  NativeCmEvent,
  NativeCmId,
  NativeContext,
  RdmaNativeAddon,
} from '../../rdma-backend/providers/native/addon.js';
import { NativeDevice } from '../../rdma-backend/providers/native/device.js';
import {
  type CmEvent,
  CmEventType,
  type CompletionQueue,
  type ConnectOptions,
  createWorkCompletions,
  type ProtectionDomain,
  VerbsError,
} from '../../rdma-backend/verbs/index.js';

/** IBV_EVENT_CQ_ERR in enum ibv_event_type (verbs.h). */
const IBV_EVENT_CQ_ERR = 0;

interface StandIn {
  device: NativeDevice;
  liveIds: Set<NativeCmId>;
  deliver(events: NativeCmEvent[]): void;
  channelReferenced(): boolean;
  /** The device's asynchronous event callback (ibv_get_async_event). */
  asyncEvent(type: number, element: number): void;
  /** What the next ibv_poll_cq of any CQ returns (-1: the CQ is in error). */
  pollResult: number;
}

function errnoError(code: string, errno: number, syscall: string): Error {
  return Object.assign(new Error(`${syscall}: ${code}`), { code, errno, syscall });
}

function standInDevice(opts: { resolveFailsAtOnce?: boolean } = {}): StandIn {
  const liveIds = new Set<NativeCmId>();
  let onAsync: ((type: number, element: number) => void) | undefined;
  let cqIds = 0;
  let onEvents: ((events: NativeCmEvent[]) => void) | undefined;
  let referenced = false;
  const addon = {
    layout: {
      LAYOUT_VERSION: 1,
      MAX_SGE: 4,
      SEND_WR_STRIDE: 32,
      SEND_WR_SGE: 16,
      RECV_WR_STRIDE: 20,
      RECV_WR_SGE: 4,
      WC_STRIDE: 10,
    },
    createCmChannel(cb: (events: NativeCmEvent[]) => void) {
      onEvents = cb;
      return {
        createId(): NativeCmId {
          const id = {
            bindAddr() {},
            listen() {},
            addresses: () => ({}),
            resolveAddr() {
              // rdma_resolve_addr fails synchronously when the kernel has no route (ENETUNREACH).
              if (opts.resolveFailsAtOnce) throw errnoError('ENETUNREACH', 101, 'rdma_resolve_addr');
            },
            resolveRoute() {},
            deviceName: () => 'mlx5_0',
            connect() {},
            accept() {},
            reject() {},
            disconnect() {},
            createQp() {
              throw new Error('no QP in the stand-in');
            },
            destroy() {
              liveIds.delete(id as unknown as NativeCmId);
            },
          };
          liveIds.add(id as unknown as NativeCmId);
          return id as unknown as NativeCmId;
        },
        setRef(r: boolean) {
          referenced = r;
        },
        destroy() {
          if (liveIds.size > 0) throw new Error(`${liveIds.size} CM id(s) still alive`);
        },
      };
    },
  } as unknown as RdmaNativeAddon;
  const context = {
    query: () => ({
      transportType: 0,
      maxMrSize: 2 ** 40,
      maxMr: 1e6,
      maxPd: 1e4,
      maxQp: 1e4,
      maxQpWr: 4096,
      maxSge: 30,
      maxSgeRd: 30,
      maxCq: 1e4,
      maxCqe: 4096,
      maxQpRdAtom: 16,
      maxQpInitRdAtom: 16,
      deviceCapFlags: 0,
      maxMw: 0,
    }),
    createCq: () => ({
      cqe: 64,
      id: ++cqIds,
      poll: () => standIn.pollResult,
      arm() {},
      setRef() {},
      destroy() {},
    }),
    watchAsyncEvents(cb: (type: number, element: number) => void) {
      onAsync = cb;
    },
    close() {},
  } as unknown as NativeContext;
  const device = new NativeDevice(addon, context, 'mlx5_0');
  const standIn: StandIn = {
    device,
    liveIds,
    deliver: (events) => onEvents!(events),
    channelReferenced: () => referenced,
    asyncEvent: (type, element) => onAsync!(type, element),
    pollResult: 0,
  };
  return standIn;
}

const pd = {} as ProtectionDomain;
const cq = { native: {} } as unknown as CompletionQueue;
const cap = { maxSendWr: 4, maxRecvWr: 4, maxSendSge: 1, maxRecvSge: 1 };

function connectOptions(onEvent: (ev: CmEvent) => void, over: Partial<ConnectOptions> = {}): ConnectOptions {
  return { host: '192.0.2.1', port: 20049, pd, sendCq: cq, recvCq: cq, cap, onEvent, ...over };
}

/** The CM id a connection was given (a private field: the stand-in's events must name it). */
function idOf(conn: unknown): NativeCmId {
  return (conn as { id: NativeCmId }).id;
}

test('a CM event handler that throws costs no other connection its event, and is reported', async (t) => {
  const s = standInDevice();
  const seenByB: CmEventType[] = [];
  const a = s.device.connect(
    connectOptions(() => {
      throw new Error('handler of connection A throws');
    }),
  );
  const b = s.device.connect(connectOptions((ev) => seenByB.push(ev.type), { host: '192.0.2.2' }));
  const warnings: Error[] = [];
  const onWarning = (w: Error) => warnings.push(w);
  process.on('warning', onWarning);
  try {
    // The addon acknowledges a whole batch to rdma_cm before handing it over: an event lost here is lost for good.
    t.notThrows(() =>
      s.deliver([
        { type: CmEventType.DISCONNECTED, status: 0, id: idOf(a) },
        { type: CmEventType.DISCONNECTED, status: 0, id: idOf(b) },
      ]),
    );
    t.deepEqual(seenByB, [CmEventType.DISCONNECTED]);
    t.is(s.device.handlerErrors, 1);
    await new Promise((r) => setImmediate(r));
    const w = warnings.find((x) => (x as Error & { code?: string }).code === 'RPCRDMA_CM_HANDLER');
    t.truthy(w, 'a process warning names the failure');
    t.regex(w!.message, /handler of connection A throws/);
  } finally {
    process.off('warning', onWarning);
    a.destroy();
    b.destroy();
  }
});

test('a connect refused by its capabilities leaves no CM id behind, and the device still closes', (t) => {
  const s = standInDevice();
  const e = t.throws(() => s.device.connect(connectOptions(() => {}, { cap: { ...cap, maxSendSge: 8 } })));
  t.true(e instanceof VerbsError, String(e));
  t.is(s.liveIds.size, 0, 'the id created for it was destroyed');
  t.false(s.channelReferenced(), 'nothing keeps the process alive');
  t.notThrows(() => s.device.close());
});

test('an address that fails at once is reported after connect() has returned, not inside it', async (t) => {
  const s = standInDevice({ resolveFailsAtOnce: true });
  let insideConnect = true;
  const seen: { type: CmEventType; insideConnect: boolean; code?: string }[] = [];
  const conn = s.device.connect(
    connectOptions((ev) =>
      seen.push({ type: ev.type, insideConnect, code: (ev.error as VerbsError | undefined)?.code }),
    ),
  );
  insideConnect = false;
  t.deepEqual(seen, [], 'nothing delivered synchronously');
  await new Promise((r) => setImmediate(r));
  t.is(seen.length, 1);
  t.is(seen[0]!.type, CmEventType.ADDR_ERROR);
  t.false(seen[0]!.insideConnect);
  t.truthy(seen[0]!.code, 'the error is a typed verbs error');
  conn.destroy();
  t.is(s.liveIds.size, 0);
  t.notThrows(() => s.device.close());
});

test('a CQ whose poll fails is in error: poll returns what it had, and the handler is woken once to see it', async (t) => {
  const s = standInDevice();
  const cq = s.device.createCq(64);
  let woken = 0;
  cq.setNotifyHandler(() => woken++);
  const wcs = createWorkCompletions(4);
  t.is(cq.poll(wcs), 0);
  t.false(cq.overrun);
  s.pollResult = -1;
  t.is(cq.poll(wcs), 0, 'no garbage records are returned');
  t.true(cq.overrun, 'sticky: the CQ is in error');
  t.is(cq.poll(wcs), 0);
  await new Promise((r) => setImmediate(r));
  t.is(woken, 1, 'no completion event will come: the handler is called once');
  cq.destroy();
});

test('IBV_EVENT_CQ_ERR marks that CQ (not another) in error and wakes its handler', async (t) => {
  const s = standInDevice();
  const a = s.device.createCq(64);
  const b = s.device.createCq(64);
  let wokenA = 0;
  let wokenB = 0;
  a.setNotifyHandler(() => wokenA++);
  b.setNotifyHandler(() => wokenB++);
  s.asyncEvent(IBV_EVENT_CQ_ERR, (b as unknown as { native: { id: number } }).native.id);
  await new Promise((r) => setImmediate(r));
  t.false(a.overrun);
  t.true(b.overrun);
  t.deepEqual([wokenA, wokenB], [0, 1]);
  a.destroy();
  b.destroy();
});
