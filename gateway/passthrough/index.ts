export { Passthrough, type PassthroughOptions, type PassthroughStats } from './passthrough.js';
export { UpstreamError, UpstreamLink, UpstreamPool } from './upstream-pool.js';
