/**
 * How test/native finds the addon. A missing or stale build never breaks `npm test` silently: on a
 * developer machine the addon tests are skipped with a loud banner naming what is missing (usually the
 * Debian packages libibverbs-dev librdmacm-dev, then `npm run build:native`); under CI — where
 * scripts/install-system-deps.sh installs them and `npm ci` builds the addon — they fail instead.
 */
import { existsSync, readdirSync } from 'node:fs';
import test from 'ava';
import {
  type DeviceAttrs,
  type Layout,
  loadAddon,
  type RdmaNativeAddon,
} from '../../rdma-backend/providers/native/addon.js';
import { inCI } from '../helpers/peers.js';

export const load = loadAddon();

/** The addon, or undefined (then `addonTest` is a loud skip, or a failure under CI). */
export const addon: RdmaNativeAddon | undefined = load.ok ? load.addon : undefined;

let warned = false;

/** `test` when the addon loaded (or under CI, where a missing addon must fail), else a loud skip. */
export function addonTest(): typeof test {
  if (load.ok || inCI) return test;
  if (!warned) {
    warned = true;
    process.stderr.write(
      `\n!!! NATIVE ADDON UNAVAILABLE: ${load.error.message}\n!!! The native addon tests are SKIPPED, not passed.\n\n`,
    );
  }
  // Every form a suite uses (`test(...)`, `test.serial(...)`) must skip, loudly, rather than crash.
  const skip = Object.assign((...args: Parameters<typeof test.skip>) => test.skip(...args), {
    serial: test.serial.skip,
    skip: test.skip,
  });
  return skip as unknown as typeof test;
}

/** The addon for a test body: throws the load error (so CI reports exactly what is missing). */
export function requireAddon(): RdmaNativeAddon {
  if (!load.ok) throw load.error;
  return load.addon;
}

/** True when the kernel exposes at least one verbs device (what `ibv_get_device_list` enumerates). */
export function kernelHasRdmaDevice(): boolean {
  const dir = '/sys/class/infiniband_verbs';
  if (!existsSync(dir)) return false;
  return readdirSync(dir).some((n) => n.startsWith('uverbs'));
}

/** What a stand-in device's `query()` answers: a small IB-like device (tests of the TypeScript side). */
export function fakeDeviceAttrs(name: string): DeviceAttrs {
  return {
    name,
    transportType: 0,
    maxMrSize: 2 ** 40,
    maxQp: 1024,
    maxQpWr: 1024,
    deviceCapFlags: 0,
    maxSge: 4,
    maxSgeRd: 4,
    maxCq: 1024,
    maxCqe: 4096,
    maxMr: 1024,
    maxPd: 16,
    maxQpRdAtom: 16,
    maxQpInitRdAtom: 16,
    maxMw: 0,
  } as DeviceAttrs;
}

/** A stand-in addon's record layout (the TypeScript side only reads its strides). */
export const FAKE_LAYOUT: Layout = {
  LAYOUT_VERSION: 1,
  MAX_SGE: 4,
  SEND_WR_STRIDE: 32,
  SEND_WR_SGE: 16,
  RECV_WR_STRIDE: 24,
  RECV_WR_SGE: 8,
  WC_STRIDE: 10,
};
