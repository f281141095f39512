/**
 * The peer behaviours the scenarios work around (docs/interop.md), checked against the installed peers so
 * the workarounds are lifted when a peer is fixed: libnfs 4.0.0's NFSv4 WRITE fails above ~3.9 KB, and
 * `nfs-cp` refuses to overwrite an existing file. If one of these starts failing, the peer changed: update
 * docs/interop.md and simplify the scenarios.
 */
import { join } from 'node:path';
import { requireExecutable, testWithPeers } from '../helpers/peers.js';
import { sha256File, writeRandomFile } from './harness/checksum.js';
import { startGanesha } from './harness/ganesha.js';
import { LibnfsError, nfsCopyIn } from './harness/libnfs.js';
import { InteropSession } from './harness/session.js';

const test = testWithPeers('ganesha.nfsd', 'nfs-cp', 'timeout');

test('libnfs 4.0.0: NFSv4 writes of 3800 B work, of 4095 B fail; nfs-cp never overwrites', async (t) => {
  requireExecutable('ganesha.nfsd');
  requireExecutable('nfs-cp');
  t.timeout(60_000);
  const session = InteropSession.open(t);
  const ganesha = await startGanesha(session, { protocols: [4] });
  const small = session.path('small');
  const smallSha = writeRandomFile(small, 3800);
  await nfsCopyIn(small, ganesha.endpoint, 'small', 4);
  t.is(await sha256File(join(ganesha.exportDir, 'small')), smallSha);

  const page = session.path('page');
  writeRandomFile(page, 4095);
  const err = await t.throwsAsync(nfsCopyIn(page, ganesha.endpoint, 'page', 4), { instanceOf: LibnfsError });
  t.false(err!.timedOut, 'fails outright rather than hanging');

  const other = session.path('other');
  writeRandomFile(other, 100);
  await t.throwsAsync(nfsCopyIn(other, ganesha.endpoint, 'small', 4), { instanceOf: LibnfsError });
  t.is(await sha256File(join(ganesha.exportDir, 'small')), smallSha, 'the existing file is untouched');
});
