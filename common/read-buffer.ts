/**
 * Accepted sockets that read into a reused buffer instead of a fresh chunk per read.
 *
 * Why: Node allocates a new 64 KiB chunk for every read of a socket. On a busy gateway that is hundreds
 * of MB/s of short-lived external memory, and V8 answers it with scavenges and mark-compacts whose cost
 * grows with the heap (docs/performance.md, 3925660 in its index: after 64-client NULL traffic had grown
 * the gateway's heap, its garbage collector took 10 % of the time of a 1 MiB SINK and the gateway's CPU
 * per MiB doubled).
 *
 * `net.Server` has no `onread` option (Node 20 and 24), so the accepted socket's handle is moved into a
 * `net.Socket` created with one: `handle` is the constructor option Node itself uses to adopt handles
 * (child_process, cluster). The server must accept with `pauseOnConnect`, so that nothing was read
 * into the old socket; the old socket is destroyed without its handle, which only settles the server's
 * connection count. Received bytes are emitted as `'data'` views of the buffer: listeners must copy what
 * they keep before returning.
 *
 * One buffer may serve every socket of the process: libuv reads one socket at a time (allocate, read,
 * callback, synchronously), so a view is only overwritten after its `'data'` listeners have returned.
 */
import net from 'node:net';

interface HandleHolder {
  _handle: object | null;
}

export interface ReadBufferOptions {
  /** As `net.Server`'s option of that name: a FIN from the peer does not end our side. */
  allowHalfOpen?: boolean;
}

/**
 * Adopts `accepted` into a socket reading into `buffer` (a Buffer shared with other sockets, or the size
 * of one of its own). Returns `accepted` itself when the peer already closed it.
 */
export function withReadBuffer(
  accepted: net.Socket,
  buffer: Buffer | number,
  options: ReadBufferOptions = {},
): net.Socket {
  const holder = accepted as unknown as HandleHolder;
  const handle = holder._handle;
  if (handle === null) return accepted; // already closed by the peer: nothing to adopt
  holder._handle = null;
  accepted.destroy();
  const into = typeof buffer === 'number' ? Buffer.allocUnsafe(buffer) : buffer;
  const socket: net.Socket = new net.Socket({
    handle,
    allowHalfOpen: options.allowHalfOpen ?? false,
    onread: {
      buffer: into,
      callback: (n: number): boolean => {
        socket.emit('data', into.subarray(0, n));
        return true;
      },
    },
  } as net.SocketConstructorOpts);
  return socket;
}
