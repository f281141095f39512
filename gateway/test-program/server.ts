/**
 * The test program's server, on the TCP frontend. The program is the server here, so unlike the gateway it
 * answers wrong calls itself, as RFC 5531 §9 prescribes: PROG_UNAVAIL for another program, PROG_MISMATCH
 * (1, 1) for another version, PROC_UNAVAIL for an unknown procedure, GARBAGE_ARGS for arguments that do
 * not decode, RPC_MISMATCH (2, 2) for an rpcvers other than 2, and AUTH_ERROR/AUTH_BADCRED for a
 * credential it cannot accept (only AUTH_NONE and AUTH_SYS are). A SOURCE count above the data limit gets
 * SYSTEM_ERR: the arguments are well formed, the server just will not produce that much.
 *
 * Records that are not calls (a REPLY: this program makes no callbacks) and calls whose header is too
 * damaged to carry an XID are dropped, counted and logged, as the Linux server does.
 */
import type { Logger } from 'pino';
import { AcceptStat, AuthFlavor, AuthStat, RejectStat } from '../../rpc/constants.js';
import { RpcHeaderError } from '../../rpc/errors.js';
import { encodeAcceptedReply, encodeDeniedReply, RpcCallHeader } from '../../rpc/message.js';
import { XdrError, XdrReader, XdrWriter } from '../../rpc/xdr.js';
import type { FrontendConnection, FrontendHandler } from '../../tcp-frontend/connection.js';
import type { FrontendLimits } from '../../tcp-frontend/limits.js';
import { type BoundAddress, FrontendServer, type ListenAddress } from '../../tcp-frontend/server.js';
import { decodeOpaque, decodeSourceArgs, encodeOpaqueParts, type SourceArgs } from './codec.js';
import { DEFAULT_MAX_TEST_DATA, TEST_PROC_NAMES, TEST_PROGRAM, TEST_VERSION, TestProc } from './constants.js';
import { sourcePattern } from './pattern.js';

export interface TestProgramStats {
  /** Successful calls by procedure name. */
  calls: Record<string, number>;
  /** Error replies by accept/reject status name (PROG_UNAVAIL, GARBAGE_ARGS, RPC_MISMATCH...). */
  errorReplies: Record<string, number>;
  /** Records dropped without a reply (not a call, or a header without a usable XID). */
  dropped: number;
  /** Bytes received by SINK and produced by SOURCE. */
  sinkBytes: number;
  sourceBytes: number;
}

/** The largest reply header this server writes: accepted PROG_MISMATCH (32 bytes) or + opaque length. */
const MAX_REPLY_HEADER = 32;

/** Answers test-program calls on any `FrontendServer` (or anything that calls `onRecord`). */
export class TestProgramHandler implements FrontendHandler {
  readonly stats: TestProgramStats = {
    calls: { NULL: 0, ECHO: 0, SINK: 0, SOURCE: 0 },
    errorReplies: {},
    dropped: 0,
    sinkBytes: 0,
    sourceBytes: 0,
  };
  private readonly maxData: number;
  private readonly log: Logger | undefined;
  // The handler runs synchronously per record, so one decoder, reader and writer serve every connection.
  private readonly call = new RpcCallHeader();
  private readonly reader = new XdrReader();
  private readonly writer = new XdrWriter(0);
  private readonly sourceArgs: SourceArgs = { count: 0, seed: 0 };

  constructor(options: { maxData?: number; logger?: Logger } = {}) {
    this.maxData = options.maxData ?? DEFAULT_MAX_TEST_DATA;
    this.log = options.logger;
  }

  onRecord(conn: FrontendConnection, record: Buffer): void {
    const call = this.call;
    try {
      call.decode(record);
    } catch (err) {
      if (!(err instanceof RpcHeaderError)) throw err;
      this.badHeader(conn, err);
      return;
    }
    const flavor = call.cred.flavor;
    if (flavor !== AuthFlavor.AUTH_NONE && flavor !== AuthFlavor.AUTH_SYS) {
      this.deny(conn, call.xid, 'AUTH_BADCRED');
      return;
    }
    if (call.prog !== TEST_PROGRAM) {
      this.error(conn, AcceptStat.PROG_UNAVAIL, 'PROG_UNAVAIL');
      return;
    }
    if (call.vers !== TEST_VERSION) {
      this.error(conn, AcceptStat.PROG_MISMATCH, 'PROG_MISMATCH');
      return;
    }
    const r = this.reader.reset(record, call.bodyOffset, call.end);
    try {
      switch (call.proc) {
        case TestProc.NULL:
          if (r.remaining !== 0)
            throw new XdrError('ERR_XDR_VALUE', 'NULL takes no arguments', 'void', r.pos);
          this.count(TestProc.NULL);
          conn.sendReply([this.header(AcceptStat.SUCCESS, -1)]);
          return;
        case TestProc.ECHO: {
          const data = decodeOpaque(r, this.maxData, 'data');
          this.count(TestProc.ECHO);
          this.replyOpaque(conn, data);
          return;
        }
        case TestProc.SINK: {
          const data = decodeOpaque(r, this.maxData, 'data');
          this.count(TestProc.SINK);
          this.stats.sinkBytes += data.length;
          conn.sendReply([this.header(AcceptStat.SUCCESS, data.length)]);
          return;
        }
        case TestProc.SOURCE: {
          const args = decodeSourceArgs(r, this.sourceArgs);
          if (args.count > this.maxData) {
            this.log?.info(
              { conn: conn.id, xid: call.xid, count: args.count, maxData: this.maxData },
              'SOURCE count over the data limit: SYSTEM_ERR',
            );
            this.error(conn, AcceptStat.SYSTEM_ERR, 'SYSTEM_ERR');
            return;
          }
          this.count(TestProc.SOURCE);
          this.stats.sourceBytes += args.count;
          this.replyOpaque(conn, sourcePattern(args.seed, args.count));
          return;
        }
        default:
          this.error(conn, AcceptStat.PROC_UNAVAIL, 'PROC_UNAVAIL');
          return;
      }
    } catch (err) {
      if (!(err instanceof XdrError)) throw err;
      this.log?.debug({ conn: conn.id, xid: call.xid, proc: call.proc, err: err.toLog() }, 'GARBAGE_ARGS');
      this.error(conn, AcceptStat.GARBAGE_ARGS, 'GARBAGE_ARGS');
    }
  }

  onClose(): void {}

  private count(proc: number): void {
    this.stats.calls[TEST_PROC_NAMES[proc]]++;
  }

  /**
   * Encodes the accepted reply header for the current call into a fresh buffer (it must outlive this
   * tick: the socket writes it later), followed by `word` when it is >= 0 (SINK's count or an opaque's
   * length), and returns it.
   */
  private header(acceptStat: AcceptStat, word: number): Buffer {
    const w = this.writer.reset(Buffer.allocUnsafe(MAX_REPLY_HEADER + 4), 0);
    encodeAcceptedReply(w, {
      xid: this.call.xid,
      acceptStat,
      mismatch:
        acceptStat === AcceptStat.PROG_MISMATCH ? { low: TEST_VERSION, high: TEST_VERSION } : undefined,
    });
    if (word >= 0) w.u32(word, 'result');
    return w.view();
  }

  /** Replies SUCCESS with `opaque<>` results: [header + length word, data (not copied), pad]. */
  private replyOpaque(conn: FrontendConnection, data: Buffer): void {
    const parts = encodeOpaqueParts(data);
    parts[0] = this.header(AcceptStat.SUCCESS, data.length);
    conn.sendReply(parts);
  }

  private error(conn: FrontendConnection, acceptStat: AcceptStat, name: string): void {
    this.stats.errorReplies[name] = (this.stats.errorReplies[name] ?? 0) + 1;
    conn.sendReply([this.header(acceptStat, -1)]);
  }

  private deny(conn: FrontendConnection, xid: number, name: 'RPC_MISMATCH' | 'AUTH_BADCRED'): void {
    this.stats.errorReplies[name] = (this.stats.errorReplies[name] ?? 0) + 1;
    const w = this.writer.reset(Buffer.allocUnsafe(24), 0);
    if (name === 'RPC_MISMATCH') {
      encodeDeniedReply(w, { xid, rejectStat: RejectStat.RPC_MISMATCH, mismatch: { low: 2, high: 2 } });
    } else {
      encodeDeniedReply(w, { xid, rejectStat: RejectStat.AUTH_ERROR, authStat: AuthStat.AUTH_BADCRED });
    }
    conn.sendReply([w.view()]);
  }

  private badHeader(conn: FrontendConnection, err: RpcHeaderError): void {
    const xid = err.details.xid;
    if (typeof xid === 'number' && err.code === 'ERR_RPC_VERSION') {
      this.deny(conn, xid, 'RPC_MISMATCH');
      return;
    }
    const badCred = err.code === 'ERR_RPC_AUTH_TOO_LONG' || err.code === 'ERR_RPC_AUTH_SYS';
    if (typeof xid === 'number' && badCred) {
      this.deny(conn, xid, 'AUTH_BADCRED');
      return;
    }
    this.stats.dropped++;
    this.log?.info({ conn: conn.id, err: err.toLog() }, 'dropped a record that is not a decodable call');
    conn.release();
  }
}

export interface TestProgramServerOptions {
  /** Listen address; default 127.0.0.1 port 0 (a free port). Ignored when `listen` is given. */
  host?: string;
  port?: number;
  listen?: readonly ListenAddress[];
  limits?: Partial<FrontendLimits>;
  maxData?: number;
  logger?: Logger;
}

export interface TestProgramServer {
  readonly frontend: FrontendServer;
  readonly handler: TestProgramHandler;
  readonly addresses: BoundAddress[];
  close(options?: { drainTimeoutMs?: number }): Promise<void>;
}

/** Serves the test program over TCP; resolves once listening. */
export async function serveTestProgram(options: TestProgramServerOptions = {}): Promise<TestProgramServer> {
  const log = options.logger;
  const handler = new TestProgramHandler({ maxData: options.maxData, logger: log });
  // A SOURCE or ECHO of maxData bytes needs a record of maxData plus the call header.
  const maxRecordSize =
    options.limits?.maxRecordSize ?? Math.max(options.maxData ?? 0, DEFAULT_MAX_TEST_DATA) + 64 * 1024;
  const frontend = new FrontendServer({
    listen: options.listen ?? [{ host: options.host ?? '127.0.0.1', port: options.port ?? 0 }],
    handler,
    limits: { ...options.limits, maxRecordSize },
    logger: log,
  });
  const addresses = await frontend.listen();
  return { frontend, handler, addresses, close: (o) => frontend.close(o) };
}
