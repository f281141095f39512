/**
 * The RPC-over-RDMA transport: one connection in both roles (`connection.ts`: setup, API, teardown; the
 * paths in `receive.ts`, `requester.ts`, `responder.ts`, `control.ts`), chunk marshalling (`marshal.ts`),
 * credits (`credits.ts`), buffers and registrations (`buffers.ts`, `registration.ts`), the connection pool
 * (`pool.ts`) and the errors a caller maps (`errors.ts`). Only what is exported here is API.
 */
export * from './connection.js';
export * from './credits.js';
export * from './errors.js';
export * from './marshal.js';
export * from './pool.js';
export { type PropertyDisposition, PropertyExchange } from './properties.js';
export type * from './types.js';
