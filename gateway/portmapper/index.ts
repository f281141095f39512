export { DiscoveryError, decodePmapDump, dumpPortmapper, type Registration } from './discover.js';
export { buildMappings } from './mappings.js';
export * from './programs.js';
export { registerWithRpcbind } from './register.js';
export { type Mapping, Portmapper, type PortmapperStats, universalAddress } from './service.js';
