/** Types for the untyped Prometheus text parser used by the tests. */
declare module 'parse-prometheus-text-format' {
  interface Family {
    name: string;
    help: string;
    type: 'COUNTER' | 'GAUGE' | 'HISTOGRAM' | 'SUMMARY' | 'UNTYPED';
    metrics: unknown[];
  }
  export default function parsePrometheusTextFormat(text: string): Family[];
}
