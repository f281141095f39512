/**
 * Loads the rdma_native addon (rdma-backend/native, built by scripts/build-native.mjs during
 * `npm install`) and describes its JS surface. Loading never throws: `loadAddon()` returns either the
 * addon or a NativeUnavailableError that says what is missing (the Debian packages when the headers were
 * absent at install time, `npm run build:native` when the binary is missing or stale).
 */
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { findProjectRoot } from '../../../common/project-root.js';
import { NativeUnavailableError } from './errors.js';

/** Must equal kAddonAbi in rdma-backend/native/src/addon.cc. */
export const EXPECTED_ADDON_ABI = 4;
/** Must equal kLayoutVersion in rdma-backend/native/src/work_requests.h. */
export const EXPECTED_LAYOUT_VERSION = 1;

export interface Layout {
  LAYOUT_VERSION: number;
  MAX_SGE: number;
  SEND_WR_STRIDE: number;
  SEND_WR_SGE: number;
  RECV_WR_STRIDE: number;
  RECV_WR_SGE: number;
  WC_STRIDE: number;
}

/** Word offsets inside the records (work_requests.h). */
export const SendWrWord = {
  WR_ID_LO: 0,
  WR_ID_HI: 1,
  OPCODE: 2,
  FLAGS: 3,
  NUM_SGE: 4,
  IMM_OR_INV_RKEY: 5,
  REMOTE_ADDR_LO: 6,
  REMOTE_ADDR_HI: 7,
  RKEY: 8,
  COMPARE_ADD_LO: 9,
  COMPARE_ADD_HI: 10,
  SWAP_LO: 11,
  SWAP_HI: 12,
} as const;
export const RecvWrWord = { WR_ID_LO: 0, WR_ID_HI: 1, NUM_SGE: 2 } as const;
export const WcWord = {
  WR_ID_LO: 0,
  WR_ID_HI: 1,
  STATUS: 2,
  OPCODE: 3,
  BYTE_LEN: 4,
  IMM_OR_INV_RKEY: 5,
  WC_FLAGS: 6,
  VENDOR_ERR: 7,
  QP_NUM: 8,
  SRC_QP: 9,
} as const;

export interface DeviceInfo {
  name: string;
  nodeType: number;
  transportType: number;
  guid: string;
}

export interface DeviceAttrs {
  name: string;
  nodeType: number;
  transportType: number;
  fwVer: string;
  nodeGuid: string;
  vendorId: number;
  vendorPartId: number;
  maxMrSize: number;
  pageSizeCap: number;
  maxQp: number;
  maxQpWr: number;
  deviceCapFlags: number;
  maxSge: number;
  maxSgeRd: number;
  maxCq: number;
  maxCqe: number;
  maxMr: number;
  maxPd: number;
  maxQpRdAtom: number;
  maxQpInitRdAtom: number;
  maxMw: number;
  atomicCap: number;
  physPortCnt: number;
  memoryWindowType2: boolean;
}

export interface NativeContext {
  name(): string;
  query(): DeviceAttrs;
  queryPort(port: number): Record<string, number>;
  allocPd(): NativePd;
  createCq(
    cqe: number,
    completions: Uint32Array,
    /** drainOnWake: each batch's record count, or -1 once when the CQ is in error. Otherwise 0. */
    onWake: (count: number) => void,
    drainOnWake?: boolean,
  ): NativeCq;
  watchAsyncEvents(onEvent: (type: number, element: number) => void): void;
  setRef(ref: boolean): void;
  close(): void;
}
export interface NativePd {
  regMr(memory: ArrayBuffer, offset: number, length: number, access: number): NativeMr;
  allocMw(type: 1 | 2): NativeMw;
  destroy(): void;
}
export interface NativeMr {
  readonly lkey: number;
  readonly rkey: number;
  readonly addr: number;
  readonly length: number;
  rereg(): void;
  destroy(): void;
}
export interface NativeMw {
  rkey(): number;
  destroy(): void;
}
export interface NativeCq {
  readonly cqe: number;
  readonly id: number;
  /** Records written into the shared array, or -1 when ibv_poll_cq failed (the CQ is in error). */
  poll(max?: number): number;
  arm(solicitedOnly: boolean): void;
  setRef(ref: boolean): void;
  destroy(): void;
}
export interface NativeQp {
  num(): number;
  postSend(first: number, count: number): void;
  postRecv(first: number, count: number): void;
  bindMw(
    mw: NativeMw,
    mr: NativeMr,
    addr: number,
    length: number,
    access: number,
    wrIdLo: number,
    wrIdHi: number,
    flags: number,
  ): number;
  query(): {
    state: number;
    maxSendWr: number;
    maxRecvWr: number;
    maxSendSge: number;
    maxRecvSge: number;
    maxInlineData: number;
  };
  toError(): void;
  destroy(): void;
}
export interface NativeConnParam {
  privateData?: Buffer;
  responderResources?: number;
  initiatorDepth?: number;
  retryCount?: number;
  rnrRetryCount?: number;
}
export interface NativeAddress {
  address: string;
  port: number;
  family: 'IPv4' | 'IPv6';
}
export interface NativeCmId {
  bindAddr(host: string, port: number): void;
  resolveAddr(srcHost: string, dstHost: string, port: number, timeoutMs: number): void;
  resolveRoute(timeoutMs: number): void;
  listen(backlog: number): void;
  connect(param?: NativeConnParam): void;
  accept(param?: NativeConnParam): void;
  reject(privateData?: Buffer): void;
  disconnect(): void;
  createQp(
    pd: NativePd,
    sendCq: NativeCq,
    recvCq: NativeCq,
    caps: {
      maxSendWr: number;
      maxRecvWr: number;
      maxSendSge: number;
      maxRecvSge: number;
      maxInlineData?: number;
    },
    sendDesc: Uint32Array,
    recvDesc: Uint32Array,
  ): NativeQp;
  deviceName(): string | undefined;
  addresses(): { local?: NativeAddress; peer?: NativeAddress };
  destroy(): void;
}
export interface NativeCmEvent {
  type: number;
  status: number;
  id?: NativeCmId;
  listenId?: NativeCmId;
  privateData?: Buffer;
  responderResources?: number;
  initiatorDepth?: number;
  qpNum?: number;
}
export interface NativeCmChannel {
  createId(): NativeCmId;
  setRef(ref: boolean): void;
  destroy(): void;
}
export interface EventSource {
  signal(value: number): void;
  setRef(ref: boolean): void;
  destroy(): void;
  /** The next wake-up throws that kind of C++ exception (a failed Node-API call, or any other). */
  failNextWake(kind: 'napi' | 'std'): void;
}
export interface ParsedSendWr {
  wrId: bigint;
  opcode: number;
  flags: number;
  numSge: number;
  totalLength: number;
  remoteAddr: number;
  rkey: number;
  immOrInvRkey: number;
}

export interface RdmaNativeAddon {
  ADDON_ABI: number;
  layout: Layout;
  listDevices(): DeviceInfo[];
  openDevice(name: string): NativeContext;
  memlockLimit(): { soft: number; hard: number };
  allocBuffer(size: number): ArrayBuffer;
  isAddonBuffer(memory: unknown): boolean;
  /**
   * Addon memory allocated now (whole pages). `kept`/`keptBytes`: allocations kept for the life of the
   * process because a registration over them could not be deregistered (never returned to malloc).
   */
  bufferStats(): { count: number; bytes: number; kept: number; keptBytes: number };
  /**
   * Every teardown call that failed inside a release (a finalizer cannot throw: ibv_dereg_mr,
   * ibv_dealloc_pd, ibv_destroy_cq, rdma_destroy_id...), by call: how many times, and the last errno.
   */
  teardownFailures(): Record<string, { count: number; lastErrno: string }>;
  pageSize(): number;
  createCmChannel(onEvents: (events: NativeCmEvent[]) => void): NativeCmChannel;
  testing: {
    EventSource: new (batch: Uint32Array, onBatch: (count: number) => void) => EventSource;
    parseSendWrs(desc: Uint32Array, first: number, count: number, maxSge: number): ParsedSendWr[];
    parseRecvWrs(
      desc: Uint32Array,
      first: number,
      count: number,
      maxSge: number,
    ): { wrId: bigint; numSge: number; totalLength: number }[];
    errnoError(errno: number, call: string): Error & { code: string; errno: number; syscall: string };
    liveResources(): number;
    addressOf(buffer: ArrayBuffer): number;
    recordTeardownFailure(call: string, errno: number): void;
    /** An Mr release's handling of its memory when ibv_dereg_mr answers `errno` (0: success). */
    deregisterOrKeep(memory: ArrayBuffer, errno: number): boolean;
  };
}

export type AddonLoad =
  | { ok: true; addon: RdmaNativeAddon; path: string }
  | { ok: false; error: NativeUnavailableError };

/** What scripts/build-native.mjs recorded in rdma-backend/native/build-status.json. */
export interface BuildStatus {
  ok: boolean;
  code?: string;
  reason?: string;
  missingPackages?: string[];
}

function readBuildStatus(root: string): BuildStatus | undefined {
  try {
    return JSON.parse(
      readFileSync(join(root, 'rdma-backend', 'native', 'build-status.json'), 'utf8'),
    ) as BuildStatus;
  } catch {
    return undefined;
  }
}

/** The error for a missing binary: the build script's own reason when it recorded one. */
export function notBuiltError(
  status: BuildStatus | undefined,
  path: string | undefined,
): NativeUnavailableError {
  if (status && !status.ok) {
    return new NativeUnavailableError(
      'addon-not-built',
      `the native verbs addon was not built: ${status.reason}`,
      {
        buildCode: status.code,
        missingPackages: status.missingPackages ?? [],
      },
    );
  }
  return new NativeUnavailableError(
    'addon-not-built',
    `the native verbs addon is not built (${path ?? 'rdma-backend/native/build/Release/rdma_native.node'} is missing): ` +
      'install the Debian packages libibverbs-dev librdmacm-dev and run `npm run build:native`',
    { path, missingPackages: [] },
  );
}

let cached: AddonLoad | undefined;

/** Loads the addon once per process (RDMA_NATIVE_ADDON overrides the path, for packagers). */
export function loadAddon(): AddonLoad {
  cached ??= loadUncached();
  return cached;
}

/**
 * The addon's teardown failures, counted per call (`teardownFailures()`), or null when this process never
 * loaded the addon (the soft provider): never loads it just to ask.
 */
export function loadedAddonTeardownFailures(): Record<string, number> | null {
  if (cached === undefined || !cached.ok) return null;
  const out: Record<string, number> = {};
  for (const [call, f] of Object.entries(cached.addon.teardownFailures())) out[call] = f.count;
  return out;
}

function loadUncached(): AddonLoad {
  const root = findProjectRoot();
  const path =
    process.env.RDMA_NATIVE_ADDON ??
    (root ? join(root, 'rdma-backend', 'native', 'build', 'Release', 'rdma_native.node') : undefined);
  if (!path || !existsSync(path))
    return { ok: false, error: notBuiltError(root ? readBuildStatus(root) : undefined, path) };
  let addon: RdmaNativeAddon;
  try {
    addon = createRequire(import.meta.url)(path) as RdmaNativeAddon;
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    const lib = /lib(ibverbs|rdmacm)\.so/.exec(msg);
    return {
      ok: false,
      error: new NativeUnavailableError(
        'addon-load-failed',
        lib
          ? `the native verbs addon cannot load: ${msg}. Install the runtime packages libibverbs1 librdmacm1 ibverbs-providers`
          : `the native verbs addon cannot load: ${msg}. Rebuild it with \`npm run build:native\``,
        { path },
        e,
      ),
    };
  }
  if (addon.ADDON_ABI !== EXPECTED_ADDON_ABI || addon.layout?.LAYOUT_VERSION !== EXPECTED_LAYOUT_VERSION) {
    return {
      ok: false,
      error: new NativeUnavailableError(
        'stale-build',
        `the native verbs addon is stale (ABI ${addon.ADDON_ABI}, layout ${addon.layout?.LAYOUT_VERSION}; this code ` +
          `expects ABI ${EXPECTED_ADDON_ABI}, layout ${EXPECTED_LAYOUT_VERSION}): run \`npm run build:native\``,
        { path },
      ),
    };
  }
  return { ok: true, addon, path };
}
