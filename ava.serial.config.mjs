// The second phase of `npm test`: suites that start real daemons or load the whole machine (nfs-ganesha,
// rpcbind on the one port 111, tshark, 10,000 connections, killed processes). They run one file at a time
// and one test at a time (`--serial` on the command line), so they never compete with each other or with
// the unit suites for the two cores and port 111. The instruction counter runs Node under valgrind for a
// minute and a half.
export default {
  files: [
    'dist/test/interop/**/*.test.js',
    'dist/test/reliability/load.test.js',
    'dist/test/reliability/faults*.test.js',
    'dist/test/bench/count-functions.test.js',
  ],
  concurrency: 1,
  timeout: '5m',
  workerThreads: false,
};
