/**
 * An accepted socket re-wrapped to read into one reused buffer (`withReadBuffer`): every byte arrives in
 * order, as views of one buffer; writes and the peer's FIN still work; the server's connection count is
 * settled, so `server.close()` completes.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import test from 'ava';
import { withReadBuffer } from '../../common/read-buffer.js';

test('bytes arrive in order as views of one reused buffer; writes, FIN and server.close() still work', async (t) => {
  const payload = randomBytes(3 * 1024 * 1024 + 17);
  const stores = new Set<ArrayBufferLike>();
  let adopted: net.Socket | undefined;
  const received: Buffer[] = [];
  const answer: Buffer[] = [];
  let clientClosed!: Promise<void>;
  const done = new Promise<void>((resolve) => {
    const server = net.createServer({ pauseOnConnect: true }, (accepted) => {
      const socket = withReadBuffer(accepted, 64 * 1024);
      adopted = socket;
      socket.on('data', (chunk: Buffer) => {
        stores.add(chunk.buffer);
        t.true(chunk.length <= 64 * 1024);
        received.push(Buffer.from(chunk)); // a copy: the view is overwritten by the next read
      });
      socket.on('end', () => socket.end(Buffer.from('bye')));
      socket.on('close', () => server.close(() => resolve()));
    });
    server.listen(0, '127.0.0.1', () => {
      const client = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1', () => {
        client.end(payload);
      });
      client.on('data', (c: Buffer) => answer.push(c));
      clientClosed = new Promise((resolveClose) => client.on('close', () => resolveClose()));
    });
  });
  await done;
  await clientClosed;
  t.is(Buffer.concat(answer).toString(), 'bye', "the client got the server's answer before its FIN");
  t.true(adopted instanceof net.Socket);
  t.true(Buffer.concat(received).equals(payload), 'every byte, in order');
  t.is(stores.size, 1, 'one buffer for every read');
});
