/**
 * The passive side's IRD/ORD negotiation of the native provider, without a device: a fake rdma_cm id
 * records what `rdma_accept` would get. rdma_get_cm_event(3) names a connect request's fields from the
 * recipient's side (`responder_resources` = the initiator's ORD, `initiator_depth` = its IRD);
 * rdma_accept(3) bounds our initiator depth by the request's `initiator_depth` and the device's
 * max_qp_init_rd_atom; on IB the passive side's ESTABLISHED event carries zeros.
 */
import test from 'ava';
import type {
  NativeCmEvent,
  NativeCmId,
  NativeConnParam,
} from '../../rdma-backend/providers/native/addon.js';
import {
  acceptIrdOrd,
  type ConnectionHost,
  NativeConnectRequest,
  requestIrdOrd,
} from '../../rdma-backend/providers/native/connection.js';
import { CmEventType, type CompletionQueue, type ProtectionDomain } from '../../rdma-backend/verbs/index.js';
import { FAKE_LAYOUT } from './native-helpers.js';

const layout = FAKE_LAYOUT;

function fakeHost(caps = { maxIrd: 16, maxOrd: 16 }): ConnectionHost {
  return {
    name: 'fake0',
    layout,
    defaultIrdOrd: { ird: Math.min(16, caps.maxIrd), ord: Math.min(16, caps.maxOrd) },
    caps,
    createId: () => {
      throw new Error('not used');
    },
    adopt: () => {},
    forget: () => {},
  };
}

/** A CM id whose QP "exists" and which records the accept parameters. */
function fakeId(): { id: NativeCmId; accepted: NativeConnParam[] } {
  const accepted: NativeConnParam[] = [];
  const qp = {
    query: () => ({ state: 1, maxSendWr: 8, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 }),
    num: () => 1,
    postSend: () => {},
    postRecv: () => {},
    destroy: () => {},
  };
  const id = {
    addresses: () => ({ peer: { address: '192.0.2.1', port: 40000 } }),
    createQp: () => qp,
    accept: (p: NativeConnParam) => accepted.push(p),
    reject: () => {},
    disconnect: () => {},
    destroy: () => {},
  } as unknown as NativeCmId;
  return { id, accepted };
}

const init = {
  pd: {} as ProtectionDomain,
  sendCq: {} as CompletionQueue,
  recvCq: {} as CompletionQueue,
  cap: { maxSendWr: 8, maxRecvWr: 8, maxSendSge: 1, maxRecvSge: 1, maxInlineData: 0 },
  onEvent: () => {},
};

/** A connect request from an initiator with IRD `ird` and ORD `ord`, in the CM's naming. */
function requestEvent(ird: number, ord: number): NativeCmEvent {
  return { type: CmEventType.CONNECT_REQUEST, status: 0, responderResources: ord, initiatorDepth: ird };
}

test('a connect request reports the initiator IRD and ORD, not swapped', (t) => {
  t.deepEqual(requestIrdOrd(requestEvent(2, 7)), { ird: 2, ord: 7 });
  const req = new NativeConnectRequest(fakeHost(), fakeId().id, requestEvent(2, 7));
  t.is(req.ird, 2, 'the initiator IRD is the event initiator_depth');
  t.is(req.ord, 7, 'the initiator ORD is the event responder_resources');
});

test('accept limits our ORD to the initiator IRD and both to the device', (t) => {
  const d = { ird: 16, ord: 16 };
  t.deepEqual(acceptIrdOrd({}, d, { maxIrd: 16, maxOrd: 16 }, { ird: 4, ord: 8 }), { ird: 16, ord: 4 });
  t.deepEqual(acceptIrdOrd({ ord: 2 }, d, { maxIrd: 16, maxOrd: 16 }, { ird: 4, ord: 8 }), {
    ird: 16,
    ord: 2,
  });
  t.deepEqual(acceptIrdOrd({ ird: 64, ord: 64 }, d, { maxIrd: 8, maxOrd: 32 }, { ird: 128, ord: 8 }), {
    ird: 8,
    ord: 32,
  });
  t.deepEqual(acceptIrdOrd({}, d, { maxIrd: 16, maxOrd: 16 }, { ird: 0, ord: 0 }), { ird: 16, ord: 0 });
});

test('the passive side accepts within the request and keeps its limits past a zeroed ESTABLISHED', (t) => {
  const { id, accepted } = fakeId();
  const req = new NativeConnectRequest(fakeHost(), id, requestEvent(4, 8));
  const conn = req.createConnection(init);
  conn.accept({ ird: 12 });
  t.is(accepted.length, 1);
  t.is(accepted[0].initiatorDepth, 4, 'rdma_accept initiator_depth ≤ the initiator IRD');
  t.is(accepted[0].responderResources, 12);
  // The IB passive side: kernel cma_ib_handler IB_CM_RTU_RECEIVED leaves the conn params zeroed.
  (conn as unknown as { onCmEvent(ev: NativeCmEvent): void }).onCmEvent({
    type: CmEventType.ESTABLISHED,
    status: 0,
    responderResources: 0,
    initiatorDepth: 0,
  });
  t.is(conn.ord, 4);
  t.is(conn.ird, 12);
});
