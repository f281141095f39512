/**
 * Transport properties (seed 004 §4): a registry of typed properties that gives every `rpcrdma2_propid`
 * its XDR type, default value, encoder and decoder, and the subset bitmaps of the property-change
 * extension (xcharext `xcharsubset`, seed 004 §4.1).
 *
 * Rules (seed 004 §4.1): a zero-length `rdma_data` means the property's default value; an id the
 * registry does not know is skipped without error; a known id whose `rdma_data` does not hold exactly one
 * value of its XDR type is RDMA2_ERR_BAD_XDR (reported by the header decoder).
 */
import { UsageError } from '../../common/errors.js';
import { XdrError, type XdrReader, XdrWriter } from '../../rpc/xdr.js';
import {
  RDMA2_DEFAULT_RBSIZ,
  RDMA2_PROPID_BRS,
  RDMA2_PROPID_RBSIZ,
  RDMA2_PROPID_REQREMINV,
  RDMA2_PROPID_RPRC,
  RDMA2_RVREQSUP_GENL,
  RDMA2_RVREQSUP_INLINE,
  RDMA2_RVREQSUP_NONE,
} from './constants.js';

/** How one property is carried inside `rdma_data`. */
export interface PropertyDefinition<T> {
  id: number;
  /** Short name used in logs, the admin API and `TransportProperties` keys. */
  name: string;
  /** The value assumed when the property is absent or sent with zero-length data. */
  defaultValue: T;
  /** Reads exactly one value; throws XdrError when the bytes are not a valid value of the type. */
  decode(r: XdrReader): T;
  /** Writes one value; throws UsageError/XdrError when `v` is not a value of the type. */
  encode(w: XdrWriter, v: T): void;
}

/** One `rpcrdma2_propval` as decoded. */
export interface PropEntry {
  /** `rdma_which`. */
  id: number;
  /**
   * `rdma_data` as a view into the received message (no copy): valid only until that receive buffer is
   * reposted — copy it (`Buffer.from`) to keep an unknown property's bytes longer.
   */
  data: Buffer;
  /** Whether the registry knows the id; unknown entries keep only `data`. */
  known: boolean;
  /** The typed value (the default when `data` is empty); undefined for unknown ids. */
  value: unknown;
  /** True when `data` was empty, i.e. the sender means the default. */
  isDefault: boolean;
}

/** `rpcrdma2_propsubset`: bit N mod 32 of word N div 32 stands for the propset entry at index N. */
export type PropSubset = number[];

const uint32Prop = (id: number, name: string, defaultValue: number): PropertyDefinition<number> => ({
  id,
  name,
  defaultValue,
  decode: (r) => r.u32(name),
  encode: (w, v) => {
    w.u32(v, name);
  },
});

const boolProp = (id: number, name: string): PropertyDefinition<boolean> => ({
  id,
  name,
  defaultValue: false,
  decode: (r) => r.bool(name),
  encode: (w, v) => {
    if (typeof v !== 'boolean') throw new UsageError('ERR_RPCRDMA_PROP_VALUE', `${name} must be a boolean`);
    w.bool(v, name);
  },
});

/** `enum rpcrdma2_rvreqsup` (seed 004 §4.2.2): values outside the enum are invalid XDR. */
const brsProp: PropertyDefinition<number> = {
  id: RDMA2_PROPID_BRS,
  name: 'brs',
  defaultValue: RDMA2_RVREQSUP_INLINE,
  decode: (r) => {
    const at = r.pos;
    const v = r.enum('brs');
    if (v !== RDMA2_RVREQSUP_NONE && v !== RDMA2_RVREQSUP_INLINE && v !== RDMA2_RVREQSUP_GENL) {
      throw new XdrError('ERR_XDR_VALUE', `brs holds ${v}, not a rpcrdma2_rvreqsup value`, 'brs', at);
    }
    return v;
  },
  encode: (w, v) => {
    if (v !== RDMA2_RVREQSUP_NONE && v !== RDMA2_RVREQSUP_INLINE && v !== RDMA2_RVREQSUP_GENL) {
      throw new UsageError('ERR_RPCRDMA_PROP_VALUE', `brs ${v} is not a rpcrdma2_rvreqsup value`);
    }
    w.enum(v, 'brs');
  },
};

/** RBSIZ (1): Receive Buffer Size, uint32, default 4096 (seed 004 §4.2.1). */
export const PROP_RBSIZ = uint32Prop(RDMA2_PROPID_RBSIZ, 'rbsiz', RDMA2_DEFAULT_RBSIZ);
/** BRS (2): Reverse Request Support, enum rpcrdma2_rvreqsup, default INLINE (seed 004 §4.2.2). */
export const PROP_BRS = brsProp;
/** REQREMINV (3, DESIGN.md §3): bool, the requester accepts Send With Invalidate; default false. */
export const PROP_REQREMINV = boolProp(RDMA2_PROPID_REQREMINV, 'reqreminv');
/** RPRC (4, DESIGN.md §3): bool, the requester accepts responder-provided Read chunks (seed 002). */
export const PROP_RPRC = boolProp(RDMA2_PROPID_RPRC, 'rprc');

/** The typed view of the properties this project knows. */
export interface TransportProperties {
  rbsiz: number;
  brs: number;
  reqreminv: boolean;
  rprc: boolean;
}

/** Every property at its default value. */
export const DEFAULT_TRANSPORT_PROPERTIES: Readonly<TransportProperties> = Object.freeze({
  rbsiz: PROP_RBSIZ.defaultValue,
  brs: PROP_BRS.defaultValue,
  reqreminv: PROP_REQREMINV.defaultValue,
  rprc: PROP_RPRC.defaultValue,
});

/** Maps property ids to their definitions. */
export class PropertyRegistry {
  private readonly byId = new Map<number, PropertyDefinition<unknown>>();

  constructor(defs: readonly PropertyDefinition<never>[] = []) {
    for (const d of defs) this.register(d);
  }

  /** Adds a property (an extension defined later); an id may be registered once. */
  register<T>(def: PropertyDefinition<T>): this {
    if (!Number.isInteger(def.id) || def.id < 0 || def.id > 0xffff_ffff) {
      throw new UsageError('ERR_RPCRDMA_PROP_ID', `property id ${def.id} is not a uint32`);
    }
    if (this.byId.has(def.id)) {
      throw new UsageError('ERR_RPCRDMA_PROP_ID', `property id ${def.id} is already registered`);
    }
    this.byId.set(def.id, def as PropertyDefinition<unknown>);
    return this;
  }

  get(id: number): PropertyDefinition<unknown> | undefined {
    return this.byId.get(id);
  }

  has(id: number): boolean {
    return this.byId.has(id);
  }

  ids(): number[] {
    return [...this.byId.keys()];
  }

  /**
   * Encodes `rdma_data` (length word, value, pad) for property `id`; `value` undefined writes zero-length
   * data (the default). Unknown ids need raw bytes: pass a Uint8Array as `value`.
   */
  encodeData(w: XdrWriter, id: number, value: unknown): void {
    if (value === undefined) {
      w.u32(0, 'rdma_data');
      return;
    }
    if (value instanceof Uint8Array) {
      w.opaque(value, 'rdma_data');
      return;
    }
    const def = this.byId.get(id);
    if (!def) throw new UsageError('ERR_RPCRDMA_PROP_ID', `property id ${id} is unknown: pass its raw bytes`);
    const lengthAt = w.reserveU32('rdma_data');
    const start = w.pos;
    def.encode(w, value);
    w.patchU32(lengthAt, w.pos - start);
    w.pad(w.pos - start);
  }

  /** Exact encoded size of `rdma_data` for `value` (what `encodeData` writes). */
  dataSize(id: number, value: unknown): number {
    if (value === undefined) return 4;
    if (value instanceof Uint8Array) return 4 + ((value.length + 3) & ~3);
    const def = this.byId.get(id);
    if (!def) throw new UsageError('ERR_RPCRDMA_PROP_ID', `property id ${id} is unknown: pass its raw bytes`);
    // Every property defined so far is one XDR word; measure anything else by encoding it once.
    if (def === PROP_RBSIZ || def === PROP_BRS || def === PROP_REQREMINV || def === PROP_RPRC) return 8;
    const w = new XdrWriter(16);
    def.encode(w, value);
    return 4 + ((w.length + 3) & ~3);
  }
}

/** The registry of the properties in seed 004 §4.2 and DESIGN.md §3 (ids 1–4). */
export function createDefaultPropertyRegistry(): PropertyRegistry {
  return new PropertyRegistry()
    .register(PROP_RBSIZ)
    .register(PROP_BRS)
    .register(PROP_REQREMINV)
    .register(PROP_RPRC);
}

/** A shared default registry (do not register extensions into it; create your own). */
export const defaultPropertyRegistry = createDefaultPropertyRegistry();

/**
 * Applies decoded entries to `base`: known properties in `TransportProperties` take their value (the
 * default when sent with zero-length data); unknown ids are ignored (seed 004 §4.1, §5.3.4).
 */
export function applyProperties(
  entries: readonly PropEntry[],
  base: Readonly<TransportProperties> = DEFAULT_TRANSPORT_PROPERTIES,
): TransportProperties {
  const out: TransportProperties = { ...base };
  for (const e of entries) {
    if (!e.known) continue;
    switch (e.id) {
      case RDMA2_PROPID_RBSIZ:
        out.rbsiz = e.value as number;
        break;
      case RDMA2_PROPID_BRS:
        out.brs = e.value as number;
        break;
      case RDMA2_PROPID_REQREMINV:
        out.reqreminv = e.value as boolean;
        break;
      case RDMA2_PROPID_RPRC:
        out.rprc = e.value as boolean;
        break;
      default:
        break;
    }
  }
  return out;
}

// ------------------------------------------------------------------------------------------------------
// Subsets (seed 004 §4.1: bit N mod 32 of word N div 32; words beyond the last are zero)

/** The subset holding the propset entries at `indices`, with no trailing zero words. */
export function subsetOf(indices: Iterable<number>): PropSubset {
  const words: number[] = [];
  for (const n of indices) {
    if (!Number.isInteger(n) || n < 0 || n > 0xffff_ffff) {
      throw new UsageError('ERR_RPCRDMA_SUBSET', `subset index ${n} is not a uint32`);
    }
    const wi = Math.floor(n / 32);
    while (words.length <= wi) words.push(0);
    words[wi] = (words[wi] | (1 << (n % 32))) >>> 0;
  }
  return words;
}

/** Whether entry `n` belongs to the subset. */
export function subsetHas(subset: readonly number[], n: number): boolean {
  const wi = Math.floor(n / 32);
  if (wi >= subset.length) return false;
  return ((subset[wi] >>> (n % 32)) & 1) === 1;
}

/** The entry indices a subset holds, ascending. */
export function subsetMembers(subset: readonly number[]): number[] {
  const out: number[] = [];
  for (let wi = 0; wi < subset.length; wi++) {
    let word = subset[wi] >>> 0;
    while (word !== 0) {
      const bit = 31 - Math.clz32(word & -word);
      out.push(wi * 32 + bit);
      word = (word & ~(1 << bit)) >>> 0;
    }
  }
  return out;
}
