/**
 * Counters of the TCP frontend, kept in one plain object the admin API (and tests) can read or copy at any
 * time. Counters only grow; gauges (`connectionsOpen`, `callsInFlight`, `connectionsWriteBlocked`) go both
 * ways. Updating them is a property increment on the hot path, nothing more.
 */
export interface FrontendStats {
  /** Connections accepted and served. */
  connectionsAccepted: number;
  /** Connections closed at once: `maxConnections` already open, server closing, or refused by the access policy (`errors` has the reason code). */
  connectionsRefused: number;
  /** Gauge: connections open now. */
  connectionsOpen: number;
  connectionsClosed: number;
  /** Gauge: connections whose socket is not draining (the last write returned false). */
  connectionsWriteBlocked: number;
  bytesIn: number;
  bytesOut: number;
  /** Records decoded from clients. */
  recordsIn: number;
  /** Records written to clients. */
  recordsOut: number;
  /** Gauge: calls dispatched and not yet released, over all connections. */
  callsInFlight: number;
  /** Times a connection's reading was paused (in-flight limit, dispatcher hold, or write backpressure). */
  readPauses: number;
  /** Times a connection's socket stopped draining (`write()` returned false). */
  writeBlocks: number;
  /** Records not written because their connection was already closed. */
  repliesDropped: number;
  /** Closed connections by close reason code (CLOSED_BY_CLIENT, IDLE_TIMEOUT, ERR_RM_..., ...). */
  closes: Record<string, number>;
  /** Abnormal events by code: record-marking errors, socket errors, handler errors, refusals. */
  errors: Record<string, number>;
}

export function createFrontendStats(): FrontendStats {
  return {
    connectionsAccepted: 0,
    connectionsRefused: 0,
    connectionsOpen: 0,
    connectionsClosed: 0,
    connectionsWriteBlocked: 0,
    bytesIn: 0,
    bytesOut: 0,
    recordsIn: 0,
    recordsOut: 0,
    callsInFlight: 0,
    readPauses: 0,
    writeBlocks: 0,
    repliesDropped: 0,
    closes: {},
    errors: {},
  };
}

/** Increments `table[code]`, creating the entry on first use. */
export function countBy(table: Record<string, number>, code: string): void {
  table[code] = (table[code] ?? 0) + 1;
}
