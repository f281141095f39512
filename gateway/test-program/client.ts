/**
 * A client for the test program over `RpcClient`: each method checks the reply status and decodes the
 * results; `source` also verifies every byte against the pattern. Failures are `TestProgramError`s that
 * say which call and what was wrong.
 */
import { GatewayError } from '../../common/errors.js';
import { AcceptStat, ReplyStat } from '../../rpc/constants.js';
import { XdrError, XdrReader } from '../../rpc/xdr.js';
import {
  type CallOptions,
  RpcClient,
  type RpcClientOptions,
  type RpcReply,
} from '../../tcp-frontend/client.js';
import { decodeOpaque, decodeU32Result, encodeOpaqueParts, encodeSourceArgs } from './codec.js';
import { TEST_PROC_NAMES, TEST_PROGRAM, TEST_VERSION, TestProc } from './constants.js';
import { findPatternMismatch } from './pattern.js';

/**
 * A test-program call that did not succeed or whose answer is wrong. Codes: `ERR_TEST_REPLY_STATUS` (not
 * SUCCESS: `details` has the statuses), `ERR_TEST_RESULT_DECODE` (results do not decode),
 * `ERR_TEST_RESULT_MISMATCH` (ECHO returned other bytes, SINK another count, SOURCE a wrong byte).
 */
export class TestProgramError extends GatewayError {}

const NO_LIMIT = 0xffff_ffff;

export class TestProgramClient {
  readonly rpc: RpcClient;
  private readonly reader = new XdrReader();

  constructor(rpc: RpcClient) {
    this.rpc = rpc;
  }

  static async connect(options: RpcClientOptions): Promise<TestProgramClient> {
    return new TestProgramClient(await RpcClient.connect(options));
  }

  async null(options?: CallOptions): Promise<void> {
    const reply = await this.rpc.call(TEST_PROGRAM, TEST_VERSION, TestProc.NULL, [], options);
    this.checkSuccess(reply, TestProc.NULL);
  }

  /** ECHO: resolves with the returned bytes after checking they equal `data`. */
  async echo(data: Buffer, options?: CallOptions): Promise<Buffer> {
    const reply = await this.rpc.call(
      TEST_PROGRAM,
      TEST_VERSION,
      TestProc.ECHO,
      encodeOpaqueParts(data),
      options,
    );
    const back = this.opaqueResult(reply, TestProc.ECHO);
    if (!back.equals(data)) {
      let at = 0;
      while (at < Math.min(back.length, data.length) && back[at] === data[at]) at++;
      throw new TestProgramError(
        'ERR_TEST_RESULT_MISMATCH',
        `ECHO returned different bytes (first at ${at})`,
        {
          xid: reply.xid,
          sent: data.length,
          received: back.length,
          firstDifference: at,
        },
      );
    }
    return back;
  }

  /** SINK: resolves with the count the server reports, after checking it equals `data.length`. */
  async sink(data: Buffer, options?: CallOptions): Promise<number> {
    const reply = await this.rpc.call(
      TEST_PROGRAM,
      TEST_VERSION,
      TestProc.SINK,
      encodeOpaqueParts(data),
      options,
    );
    this.checkSuccess(reply, TestProc.SINK);
    let count: number;
    try {
      count = decodeU32Result(this.reader.reset(reply.body), 'count');
    } catch (err) {
      throw this.decodeError(reply, TestProc.SINK, err);
    }
    if (count !== data.length) {
      throw new TestProgramError(
        'ERR_TEST_RESULT_MISMATCH',
        `SINK counted ${count} bytes, ${data.length} sent`,
        {
          xid: reply.xid,
          sent: data.length,
          counted: count,
        },
      );
    }
    return count;
  }

  /** SOURCE: resolves with the `count` bytes returned, after verifying each against the pattern of `seed`. */
  async source(count: number, seed: number, options?: CallOptions): Promise<Buffer> {
    const reply = await this.rpc.call(
      TEST_PROGRAM,
      TEST_VERSION,
      TestProc.SOURCE,
      encodeSourceArgs(count, seed),
      options,
    );
    const data = this.opaqueResult(reply, TestProc.SOURCE);
    const bad = data.length === count ? findPatternMismatch(data, seed) : -1;
    if (data.length !== count || bad >= 0) {
      throw new TestProgramError(
        'ERR_TEST_RESULT_MISMATCH',
        data.length !== count
          ? `SOURCE returned ${data.length} bytes, ${count} asked`
          : `SOURCE byte ${bad} differs from the pattern of seed ${seed}`,
        { xid: reply.xid, count, received: data.length, seed, firstDifference: bad },
      );
    }
    return data;
  }

  close(): Promise<void> {
    return this.rpc.close();
  }

  private opaqueResult(reply: RpcReply, proc: number): Buffer {
    this.checkSuccess(reply, proc);
    try {
      return decodeOpaque(this.reader.reset(reply.body), NO_LIMIT, 'data');
    } catch (err) {
      throw this.decodeError(reply, proc, err);
    }
  }

  private checkSuccess(reply: RpcReply, proc: number): void {
    if (reply.replyStat === ReplyStat.MSG_ACCEPTED && reply.acceptStat === AcceptStat.SUCCESS) return;
    throw new TestProgramError(
      'ERR_TEST_REPLY_STATUS',
      `${TEST_PROC_NAMES[proc]} was not successful (reply_stat ${reply.replyStat}, accept_stat ${reply.acceptStat}, reject_stat ${reply.rejectStat})`,
      {
        xid: reply.xid,
        proc,
        replyStat: reply.replyStat,
        acceptStat: reply.acceptStat,
        rejectStat: reply.rejectStat,
        authStat: reply.authStat,
      },
    );
  }

  private decodeError(reply: RpcReply, proc: number, err: unknown): TestProgramError {
    return new TestProgramError(
      'ERR_TEST_RESULT_DECODE',
      `${TEST_PROC_NAMES[proc]} results do not decode`,
      { xid: reply.xid, ...(err instanceof XdrError ? err.toLog() : {}) },
      { cause: err },
    );
  }
}
