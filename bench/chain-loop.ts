/**
 * `node dist/bench/chain-loop.js [--connections 4] [--depth 16] [--pool 1] [--target HOST:PORT]
 * [--seconds 1] [--rounds 5] [--calls N]`: NULL calls in a closed loop through the whole product in this process, as `npm start` runs
 * it: TCP client → frontend → dispatcher → router → RPC-over-RDMA transport → soft iWARP → embedded
 * responder → TCP → the built-in test program. With the defaults it is the `null-c64` workload of the
 * scenarios (4 connections × 16 calls outstanding) against the `gw-v2-p1` chain, but in one event loop.
 *
 * It is the transport loop's companion (`transport-loop.ts`, docs/performance.md "Counting instructions per
 * call"): that one counts the RPC-over-RDMA layers alone; this one adds what a NULL call costs in the
 * frontend, the router, the responder's upstream link and the test program, which is where the NULL target
 * is decided. The client is lean on purpose (calls written from a template, replies checked by their record
 * mark and two words, no promise per call), so that the count is the product's, not the load generator's:
 *
 *     for n in 10000 30000; do valgrind --tool=callgrind --callgrind-out-file=/dev/null \
 *       node dist/bench/chain-loop.js --calls $n 2>&1 | grep Collected; done
 *
 * The difference of the two counts over 20,000 is the instructions per NULL call of every layer together
 * (user space only: the system calls are the kernel's).
 *
 * `--target HOST:PORT` starts no gateway and sends the calls to any server of the test program instead
 * (the program alone, a proxy chain, a gateway elsewhere): counted the same way, the test program alone
 * is the part of the chain's count that is not the product's.
 */
import { connect, type Socket } from 'node:net';
import { loadConfig } from '../gateway/config.js';
import { type Gateway, startGateway } from '../gateway/gateway.js';
import { TEST_PROGRAM, TEST_VERSION, TestProc } from '../gateway/test-program/constants.js';
import { encodeCallHeader } from '../rpc/message.js';
import { XdrWriter } from '../rpc/xdr.js';
import { type HostPort, parseHostPort } from '../tcp-frontend/address.js';
import { frameRecord } from '../tcp-frontend/record-marking.js';
import { LoopCommand } from './loop.js';

const cmd = new LoopCommand('chain-loop', {
  connections: { type: 'string', default: '4' },
  depth: { type: 'string', default: '16' },
  pool: { type: 'string', default: '1' },
  target: { type: 'string' },
});
const connections = cmd.whole('connections');
const depth = cmd.whole('depth');
const poolSize = cmd.whole('pool');
cmd.checkShared();

/** A NULL call with AUTH_NONE, record mark included; each call is this with its own XID. */
const CALL = (() => {
  const w = new XdrWriter(64);
  encodeCallHeader(w, { xid: 0, prog: TEST_PROGRAM, vers: TEST_VERSION, proc: TestProc.NULL });
  return Buffer.concat(frameRecord(w.toBuffer()));
})();
/** xid, REPLY, MSG_ACCEPTED, AUTH_NONE verifier (flavor, length), SUCCESS (RFC 5531 §9). */
const REPLY_LENGTH = 24;
/** Its record mark: the last fragment bit and the length (RFC 5531 §11). */
const REPLY_MARK = 0x80000000 + REPLY_LENGTH;

/** One client connection: its calls are written in one batch per reply batch read. */
class LeanClient {
  private carry: Buffer | null = null;

  constructor(
    readonly socket: Socket,
    private readonly chain: ChainLoop,
  ) {
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', (e) => chain.fail(`client socket: ${e.message}`));
    socket.on('close', () => {
      if (!chain.closing) chain.fail('the server closed a client connection');
    });
  }

  send(calls: number): void {
    if (calls === 0) return;
    const out = Buffer.allocUnsafe(calls * CALL.length);
    for (let i = 0; i < calls; i++) {
      const at = i * CALL.length;
      CALL.copy(out, at);
      out.writeUInt32BE(this.chain.nextXid(), at + 4);
    }
    this.chain.outstanding += calls;
    this.socket.write(out);
  }

  private onData(chunk: Buffer): void {
    let buf = chunk;
    if (this.carry !== null) {
      buf = Buffer.concat([this.carry, chunk]);
      this.carry = null;
    }
    let at = 0;
    let replies = 0;
    while (buf.length - at >= 4 + REPLY_LENGTH) {
      const mark = buf.readUInt32BE(at);
      // A NULL reply is one fragment of 24 bytes, accepted with SUCCESS; anything else is a broken chain.
      if (mark !== REPLY_MARK || buf.readUInt32BE(at + 12) !== 0 || buf.readUInt32BE(at + 24) !== 0)
        this.chain.fail(`unexpected reply: ${buf.subarray(at, at + 4 + REPLY_LENGTH).toString('hex')}`);
      at += 4 + REPLY_LENGTH;
      replies++;
    }
    if (at < buf.length) this.carry = Buffer.from(buf.subarray(at));
    this.send(this.chain.completed(replies));
  }
}

class ChainLoop {
  closing = false;
  private xid = 1;
  private done = 0;
  private more: (done: number, outstanding: number) => boolean = () => false;
  private resolve: ((done: number) => void) | null = null;
  readonly clients: LeanClient[] = [];

  nextXid(): number {
    const x = this.xid;
    this.xid = (this.xid + 1) >>> 0 || 1;
    return x;
  }

  /** Calls written and not yet answered, all clients together. */
  outstanding = 0;

  /** `replies` calls of one client completed: how many it starts in their place. */
  completed(replies: number): number {
    let again = 0;
    for (let i = 0; i < replies; i++) {
      this.done++;
      this.outstanding--;
      if (this.more(this.done, this.outstanding + again)) again++;
    }
    if (again === 0 && this.outstanding === 0 && this.resolve !== null) {
      const resolve = this.resolve;
      this.resolve = null;
      resolve(this.done);
    }
    return again;
  }

  loop(more: (done: number, outstanding: number) => boolean): Promise<number> {
    return new Promise((resolve) => {
      this.done = 0;
      this.more = more;
      this.resolve = resolve;
      for (const c of this.clients) c.send(depth);
    });
  }

  fail(reason: string): never {
    process.stderr.write(`chain-loop: ${reason}\n`);
    process.exit(1);
  }
}

/** The gateway as `npm start` runs it (embedded responder and test program), on a free loopback port. */
async function startChain(): Promise<Gateway> {
  const { config } = loadConfig({ env: {}, flags: new Map() });
  config.frontend.listen = [{ host: '127.0.0.1', port: 0 }];
  config.rdma.provider = 'soft';
  config.rdma.poolSize = poolSize;
  config.log.level = 'silent';
  return startGateway({ config });
}

function target(text: string): HostPort {
  try {
    return parseHostPort(text);
  } catch (e) {
    return cmd.refuse(`--target: ${(e as Error).message}`);
  }
}

const chain = new ChainLoop();
const gateway = cmd.values.target === undefined ? await startChain() : null;
const { host, port } = gateway?.addresses[0] ?? target(cmd.values.target as string);
for (let i = 0; i < connections; i++) {
  const socket = connect({ host, port });
  await new Promise<void>((resolve) => {
    socket.once('connect', resolve);
    socket.once('error', (e) => chain.fail(`cannot connect to ${host}:${port}: ${e.message}`));
  });
  chain.clients.push(new LeanClient(socket, chain));
}

await cmd.run((more) => chain.loop(more));
chain.closing = true;
for (const c of chain.clients) c.socket.destroy();
await gateway?.stop(1000);
