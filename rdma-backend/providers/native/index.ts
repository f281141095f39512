/** The native verbs provider: libibverbs/librdmacm through the rdma_native addon (rdma-backend/native). */
export { loadAddon, loadedAddonTeardownFailures } from './addon.js';
export { NativeDevice } from './device.js';
export { memlockAdvice, NativeUnavailableError, toVerbsError } from './errors.js';
export { createNativeProvider, type NativeAvailability, nativeAvailability } from './provider.js';
