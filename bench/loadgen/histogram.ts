/**
 * The latency histogram every load generator records into, and the summary read from it: one definition,
 * so that a generator's histogram and the merge of several (`split.ts`) have the same range and precision
 * and their percentiles are read the same way.
 */
import hdr from 'hdr-histogram-js';
import type { LatencySummary } from './spec.js';

/** Microseconds, 1 µs .. 60 s, 3 significant digits. */
export function latencyHistogram(): hdr.Histogram {
  return hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 60_000_000,
    numberOfSignificantValueDigits: 3,
  });
}

export function summarizeLatency(h: hdr.Histogram): LatencySummary {
  return {
    p50: h.getValueAtPercentile(50),
    p90: h.getValueAtPercentile(90),
    p99: h.getValueAtPercentile(99),
    p999: h.getValueAtPercentile(99.9),
    max: h.maxValue,
    mean: h.mean,
  };
}
