/**
 * The native verbs provider (kernel bypass through libibverbs/librdmacm). `nativeAvailability()` tells,
 * without throwing, whether it can be used here and why not; `createNativeProvider()` returns a
 * VerbsProvider whose `listDevices`/`openDevice` reject with NativeUnavailableError when it cannot.
 */
import type { Device, VerbsProvider } from '../../verbs/index.js';
import { loadAddon, type NativeContext, type RdmaNativeAddon } from './addon.js';
import { NativeDevice } from './device.js';
import { type AddonError, isAddonError, NativeUnavailableError, noDeviceError } from './errors.js';
import { SharedContexts } from './shared-context.js';

export type NativeAvailability =
  | { available: true; devices: string[] }
  | {
      available: false;
      reason: NativeUnavailableError['reason'];
      message: string;
      error: NativeUnavailableError;
    };

function addonOrThrow(): RdmaNativeAddon {
  const load = loadAddon();
  if (!load.ok) throw load.error;
  return load.addon;
}

function deviceNames(addon: RdmaNativeAddon): string[] {
  let list: { name: string }[];
  try {
    list = addon.listDevices();
  } catch (e) {
    throw noDeviceError(isAddonError(e) ? e : undefined);
  }
  if (list.length === 0) throw noDeviceError();
  return list.map((d) => d.name);
}

/** Whether the native provider can run here: the addon loads and at least one device exists. */
export function nativeAvailability(): NativeAvailability {
  try {
    return { available: true, devices: deviceNames(addonOrThrow()) };
  } catch (e) {
    if (e instanceof NativeUnavailableError)
      return { available: false, reason: e.reason, message: e.message, error: e };
    throw e;
  }
}

function openError(e: unknown, name: string): Error {
  if (!isAddonError(e)) return e instanceof Error ? e : new Error(String(e));
  const err = e as AddonError;
  if (err.code === 'EACCES' || err.code === 'EPERM') {
    return new NativeUnavailableError(
      'permission',
      `cannot open RDMA device ${name}: ${err.message}. The process needs read/write access to ` +
        '/dev/infiniband/uverbs* and /dev/infiniband/rdma_cm (in a container: pass them with --device, and ' +
        'raise the memlock ulimit).',
      { device: name, errno: err.errno },
      e,
    );
  }
  if (err.code === 'ENODEV' || err.code === 'ENOENT') {
    return new NativeUnavailableError(
      'no-device',
      `no RDMA device named ${name}: ${err.message}`,
      { device: name },
      e,
    );
  }
  return e;
}

/** Per addon (one per environment): every provider of this environment shares its device contexts. */
const sharedContexts = new WeakMap<RdmaNativeAddon, SharedContexts>();

function contextsOf(addon: RdmaNativeAddon): SharedContexts {
  let s = sharedContexts.get(addon);
  if (!s) {
    s = new SharedContexts((name) => addon.openDevice(name));
    sharedContexts.set(addon, s);
  }
  return s;
}

/** `addon` replaces the loaded addon (tests, with a stand-in). */
export function createNativeProvider(options: { addon?: RdmaNativeAddon } = {}): VerbsProvider {
  const getAddon = () => options.addon ?? addonOrThrow();
  return {
    name: 'native',
    listDevices: async () => deviceNames(getAddon()),
    openDevice: async (name?: string): Promise<Device> => {
      const addon = getAddon();
      const names = deviceNames(addon);
      const chosen = name ?? names[0];
      if (!names.includes(chosen)) {
        throw new NativeUnavailableError(
          'no-device',
          `no RDMA device named ${chosen} (have: ${names.join(', ')})`,
          {
            device: chosen,
            devices: names,
          },
        );
      }
      // Opening a device twice in one process (the gateway with an embedded peer) shares its context:
      // see shared-context.ts.
      let context: NativeContext | undefined;
      try {
        context = contextsOf(addon).acquire(chosen);
        return new NativeDevice(addon, context, chosen);
      } catch (e) {
        try {
          context?.close();
        } catch {
          // the open failure is the one to report
        }
        throw openError(e, chosen);
      }
    },
  };
}
