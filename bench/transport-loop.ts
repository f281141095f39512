/**
 * `node dist/bench/transport-loop.js [--depth 128] [--size 0] [--seconds 1] [--rounds 5] [--calls N]
 * [--lend-calls]`: the transport suite's READ-like call in a closed loop, both ends in this process on the
 * soft provider, without the baseline: an instrument for the per-call cost of the RPC-over-RDMA layers.
 *
 * By default it prints, per round, calls/s and this process's CPU time per call (user and system). On a
 * shared VM those move by a quarter from minute to minute, more than most single changes to the per-call
 * path; `--calls N` instead runs exactly N calls (after a 300 ms warm-up) and says only that, for an
 * instruction count that does not move (docs/performance.md, "Counting instructions per call"):
 *
 *     for n in 60000 160000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
 *       node dist/bench/transport-loop.js --calls $n 2>&1 | grep Collected; done
 *
 * The difference of the two counts over 100,000 is the instructions per call of both ends.
 */
import { LoopCommand } from './loop.js';
import { sourceCall, transportPair } from './suites/transport.js';

const cmd = new LoopCommand('transport-loop', {
  depth: { type: 'string', default: '128' },
  size: { type: 'string', default: '0' },
  'lend-calls': { type: 'boolean', default: false },
});
const depth = cmd.whole('depth');
const size = cmd.whole('size', true);
cmd.checkShared();
const pair = await transportPair(depth, cmd.values['lend-calls']);
let xid = 1;

/** Keeps `depth` calls outstanding until `more()` says stop; resolves with the calls completed. */
function loop(more: (done: number, outstanding: number) => boolean): Promise<number> {
  return new Promise((resolve) => {
    let done = 0;
    let outstanding = 0;
    pair.setDone(() => {
      outstanding--;
      done++;
      if (more(done, outstanding)) {
        outstanding++;
        pair.client.submit(sourceCall(xid++, size));
      } else if (outstanding === 0) resolve(done);
    });
    for (let i = 0; i < depth; i++) {
      outstanding++;
      pair.client.submit(sourceCall(xid++, size));
    }
  });
}

await cmd.run(loop);
await pair.close();
