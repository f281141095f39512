/**
 * The admin API (Fastify): transport properties, statistics, connections, health, Prometheus, OpenAPI.
 * It reaches the gateway only through `GatewayControl` (`control.ts`).
 */

export {
  type AdminAccessSettings,
  type AdminAccessVerdict,
  type AdminAccessViolation,
  checkAdminAccess,
} from './access-rules.js';
export {
  type AdminApi,
  type AdminApiOptions,
  createAdminApi,
  DEFAULT_ADMIN_HOST,
  DEFAULT_ADMIN_PORT,
} from './app.js';
export { BearerAuth, isLoopbackHost } from './auth.js';
export type * from './control.js';
export { PROPERTY_NAMES } from './control.js';
export { AdminError, ControlError } from './errors.js';
export { ExpositionWriter, escapeLabelValue, renderGatewayMetrics } from './metrics.js';
export { judgeReadiness } from './readiness.js';
