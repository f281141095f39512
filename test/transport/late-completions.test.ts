/**
 * Completions polled after teardown. On the native provider DISCONNECTED and the CQ's completions come
 * from different fds, so a successful completion (a Local Invalidate, an RDMA Read of a responder-provided
 * Read chunk) can be polled after teardown failed its call and freed its state. It must act on nothing:
 * no second outcome for the call (nor one for a call of null), no index twice in `freeStates`, no RDMA
 * Read posted on the dead connection. The completion is held back from the CQ here and delivered after.
 */
import test, { type ExecutionContext } from 'ava';
import type { RpcRdmaConnection } from '../../rdma-backend/transport/index.js';
import { KIND_INV, KIND_PULL, KIND_SHIFT } from '../../rdma-backend/transport/options.js';
import { onCompletion } from '../../rdma-backend/transport/receive.js';
import { onInvalidated, onPullDone } from '../../rdma-backend/transport/requester.js';
import { createWorkCompletions, type WorkCompletion } from '../../rdma-backend/verbs/index.js';
import { type Loopback, loopback, pattern, sourceCall, TestCall } from './loopback.js';

/** Keeps the first completion of `kind` out of what `conn` polls; it is returned for a later delivery. */
function holdBack(conn: RpcRdmaConnection, kind: number): { held: WorkCompletion | null } {
  const box: { held: WorkCompletion | null } = { held: null };
  const cq = conn.cq;
  const poll = cq.poll.bind(cq);
  cq.poll = (wcs: WorkCompletion[]) => {
    for (;;) {
      const n = poll(wcs);
      let m = 0;
      for (let i = 0; i < n; i++) {
        const wc = wcs[i];
        if (box.held === null && wc.wrId % KIND_SHIFT === kind) {
          const copy = createWorkCompletions(1)[0];
          copy.copyFrom(wc);
          box.held = copy;
          continue;
        }
        wcs[i] = wcs[m];
        wcs[m++] = wc;
      }
      // All of this batch was held back: poll on, or the caller would take the CQ for empty.
      if (m > 0 || n === 0) return m;
    }
  };
  return box;
}

async function until(cond: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  if (!cond()) throw new Error(`timed out waiting for ${what}`);
}

/** After the late completion: every call reported once, with its own call, and no state freed twice. */
function nothingActedOn(t: ExecutionContext, lb: Loopback, outcomes: number): void {
  t.is(lb.collector.outcomes.length, outcomes, 'no second outcome');
  for (const o of lb.collector.outcomes) {
    t.not(o.call, null);
    t.is(o.error?.code, 'ERR_TRANSPORT_CONNECTION_LOST');
  }
  t.is(new Set(lb.client.freeStates).size, lb.client.freeStates.length, 'no state index freed twice');
  t.is(lb.client.counters.handlerErrors, 0);
}

test('a Local Invalidate completed after teardown does not complete its (failed, freed) call again', async (t) => {
  // No Send With Invalidate from the server: the requester fences the Write chunk with a Local Invalidate.
  const lb = await loopback({ server: { useRemoteInvalidate: false } });
  try {
    const box = holdBack(lb.client, KIND_INV);
    lb.client.submit(sourceCall(1, 5000));
    await until(() => box.held !== null, 'the Local Invalidate completion');
    t.is(lb.collector.outcomes.length, 0, 'the call waits for its invalidation');
    lb.client.close();
    await lb.collector.wait(1);
    t.is(lb.collector.outcomes[0].error?.retransmit, true);
    onCompletion(lb.client, box.held as WorkCompletion);
    nothingActedOn(t, lb, 1);
    // The handler itself, reached another way, finds the state freed as well.
    const st = lb.client.states[Math.floor((box.held as WorkCompletion).wrId / KIND_SHIFT)];
    t.is(st.call, null);
    onInvalidated(lb.client, st);
    nothingActedOn(t, lb, 1);
  } finally {
    await lb.close();
  }
});

test('an RDMA Read of a responder-provided Read chunk completed after teardown: no reply, no DONE, no further Read', async (t) => {
  // ORD 1: the second reply's pull waits behind the first, whose completion is held back.
  const lb = await loopback({ client: { ord: 1 } });
  lb.responder.ddpResults = false;
  try {
    lb.client.submit(TestCall.echo(1, Buffer.from('v2 first'), false));
    await lb.collector.wait(1);
    lb.collector.outcomes.length = 0;
    const box = holdBack(lb.client, KIND_PULL);
    for (const xid of [2, 3]) {
      const c = TestCall.echo(xid, pattern(6000, xid), false);
      c.maxReplySize = 1000; // no Reply chunk: each reply comes in a responder-provided Read chunk
      lb.client.submit(c);
    }
    await until(() => box.held !== null && lb.client.readJobs.length === 1, 'a pull held, one waiting');
    const dones = lb.client.counters.donesSent;
    const reads = lb.client.counters.rdmaReads;
    lb.client.close();
    await lb.collector.wait(2);
    t.is(lb.client.readJobs.length, 0, 'the Reads not yet posted went with the connection');
    const idx = Math.floor((box.held as WorkCompletion).wrId / KIND_SHIFT);
    onCompletion(lb.client, box.held as WorkCompletion);
    nothingActedOn(t, lb, 2);
    onPullDone(lb.client, idx);
    nothingActedOn(t, lb, 2);
    t.is(lb.client.states[idx].pullHeader, null, 'a freed state holds no pull');
    t.is(lb.client.states[idx].pullSink, null);
    t.is(lb.client.counters.donesSent, dones, 'no DONE for a call already failed');
    t.is(lb.client.counters.rdmaReads, reads, 'no Read posted on the dead connection');
  } finally {
    await lb.close();
  }
});
