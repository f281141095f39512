/**
 * Preloaded into the gateway and the responder by `npm run bench -- --profile`
 * (`node --import <this module>?out=FILE.heapprofile`): V8's sampling heap profiler over the whole life of
 * the process, written to `out` when it exits. Unlike `node --heap-prof`, which keeps only the sampled
 * objects still alive at exit, it counts the objects the garbage collector has already freed too: what a
 * call's garbage is made of, which is what the hot-path rule ("no per-message object churn") is about.
 * `profile-summary` reads the file (bytes allocated per function); Chrome DevTools opens it as well.
 *
 * Only Node.js built-ins are imported: this runs before, and beside, the product's own modules.
 */
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector';

/**
 * One sample per this many bytes allocated on average: V8's default, cheap enough to leave the CPU
 * profile taken in the same run readable (a stack walk per ~32 KiB, a few thousand per second).
 */
const SAMPLING_INTERVAL = 32 * 1024;

const out = new URL(import.meta.url).searchParams.get('out');
if (out) {
  const session = new Session();
  session.connect();
  session.post('HeapProfiler.startSampling', {
    samplingInterval: SAMPLING_INTERVAL,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  // The in-process inspector session answers synchronously, so the profile can be taken on 'exit'.
  process.once('exit', () => {
    session.post('HeapProfiler.stopSampling', (err, result) => {
      if (err) process.stderr.write(`allocation sampler: ${err.message}\n`);
      else writeFileSync(out, JSON.stringify(result.profile));
    });
    session.disconnect();
  });
}
