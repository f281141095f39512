/**
 * `node dist/bench/scenarios/node-relay.js PORT HOST:PORT`: a TCP relay in Node.js, one process, one thread,
 * no parsing: each accepted connection is piped both ways to a new connection to HOST:PORT. Two of them in
 * series are the `node` chain, the floor of any two-process Node.js chain on this machine: what the event
 * loop, libuv and the stream machinery cost per call and per byte before any RPC or RDMA work.
 */
import { connect, createServer, type Socket } from 'node:net';

const [listenArg, targetArg] = process.argv.slice(2);
const listenPort = Number(listenArg);
const at = targetArg?.lastIndexOf(':') ?? -1;
const host = targetArg?.slice(0, at);
const port = Number(targetArg?.slice(at + 1));
if (!Number.isInteger(listenPort) || at <= 0 || !Number.isInteger(port)) {
  process.stderr.write('usage: node-relay.js LISTEN_PORT HOST:PORT\n');
  process.exit(2);
}

function relay(client: Socket): void {
  const upstream = connect({ host, port, noDelay: true });
  client.pipe(upstream);
  upstream.pipe(client);
  const close = () => {
    client.destroy();
    upstream.destroy();
  };
  for (const s of [client, upstream]) {
    s.on('error', close);
    s.on('close', close);
  }
}

const server = createServer({ noDelay: true }, relay);
server.listen({ host: '127.0.0.1', port: listenPort, backlog: 1024 });
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.on(signal, () => process.exit(0));
