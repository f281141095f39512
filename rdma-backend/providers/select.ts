/**
 * Provider selection (DESIGN.md §3 "Providers"): `auto` picks the native provider when the addon loads
 * and an RDMA device exists, the soft provider otherwise; `native` and `soft` force one. Forcing
 * `native` where it cannot run fails with the NativeUnavailableError that says what is missing.
 */
import { ConfigError } from '../../common/errors.js';
import type { VerbsProvider } from '../verbs/index.js';
import { createNativeProvider, nativeAvailability } from './native/index.js';
import { createSoftProvider, type SoftProviderOptions } from './soft/index.js';

export type ProviderChoice = 'auto' | 'native' | 'soft';

export interface ProviderSelection {
  provider: VerbsProvider;
  /** Why this provider: for the startup log line and the admin API. */
  reason: string;
}

export interface SelectOptions {
  soft?: SoftProviderOptions;
}

export function selectProvider(
  choice: ProviderChoice = 'auto',
  options: SelectOptions = {},
): ProviderSelection {
  switch (choice) {
    case 'soft':
      return { provider: createSoftProvider(options.soft), reason: 'soft provider forced by configuration' };
    case 'native': {
      const a = nativeAvailability();
      if (!a.available) throw a.error;
      return {
        provider: createNativeProvider(),
        reason: `native provider forced by configuration (devices: ${a.devices.join(', ')})`,
      };
    }
    case 'auto': {
      const a = nativeAvailability();
      if (a.available)
        return { provider: createNativeProvider(), reason: `RDMA device(s) found: ${a.devices.join(', ')}` };
      return { provider: createSoftProvider(options.soft), reason: `soft provider: ${a.message}` };
    }
    default:
      throw new ConfigError(
        'CONFIG_INVALID',
        `rdma provider must be auto, native or soft, not ${String(choice)}`,
        {
          key: 'provider',
          value: choice,
        },
      );
  }
}
