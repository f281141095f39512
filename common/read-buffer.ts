/**
 * Accepted soft-iWARP streams read into one reused buffer, as active ones do with `onread`.
 *
 * Why: Node allocates a fresh chunk for every read of a socket; on the responder, which receives the
 * RDMA Read Responses of every large call (NFS WRITE, SINK), that is hundreds of MB/s of short-lived
 * external memory, and V8 answers it with mark-compacts every few tens of milliseconds
 * (docs/performance.md: 12-15 % of the responder's time on 1 MiB SINK). The QP copies everything it
 * keeps out of a chunk before returning (headers, trailers, payload into the registered sink), so one
 * buffer per connection serves.
 *
 * `net.Server` has no `onread` option (Node 20 and 24), so the accepted socket's handle is moved into a
 * `net.Socket` created with one: `handle` is the constructor option Node itself uses to adopt handles
 * (child_process, cluster). The server must accept with `pauseOnConnect`, so that nothing was read
 * into the old socket; the old socket is destroyed without its handle, which only settles the server's
 * connection count. Received bytes are emitted as `'data'` views of the reused buffer: listeners must
 * copy what they keep.
 */
import net from 'node:net';

interface HandleHolder {
  _handle: object | null;
}

export function withReadBuffer(accepted: net.Socket, size: number): net.Socket {
  const holder = accepted as unknown as HandleHolder;
  const handle = holder._handle;
  if (handle === null) return accepted; // already closed by the peer: nothing to adopt
  holder._handle = null;
  accepted.destroy();
  const buffer = Buffer.allocUnsafe(size);
  const socket: net.Socket = new net.Socket({
    handle,
    onread: {
      buffer,
      callback: (n: number): boolean => {
        socket.emit('data', buffer.subarray(0, n));
        return true;
      },
    },
  } as net.SocketConstructorOpts);
  return socket;
}
