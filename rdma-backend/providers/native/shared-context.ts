/**
 * One native Context per device name, shared by every NativeDevice opened on it in this environment.
 * The addon takes the context rdma_cm opened (a PD must live on the cm_id's ibv_context), and librdmacm
 * hands out one process-global ibv_context per device (rdma_get_devices(3): the contexts belong to the
 * library), so two Contexts over it would watch the same async_fd and the second uv_poll_init fails
 * with EEXIST — the gateway with the native provider and an embedded peer opens its device twice.
 * The async events are watched once and fanned out; the context closes with the last handle.
 *
 * A device dropped without close() keeps its share: the context then stays open (and reusable by the
 * next openDevice) for the life of the process, as librdmacm keeps its own contexts anyway.
 */
import type { NativeContext } from './addon.js';

type AsyncHandler = (type: number, element: number) => void;

interface Shared {
  readonly context: NativeContext;
  refs: number;
  readonly subscribers: Set<AsyncHandler>;
  watching: boolean;
}

export class SharedContexts {
  private readonly open = new Map<string, Shared>();

  constructor(private readonly openContext: (name: string) => NativeContext) {}

  /** A handle on `name`'s context, opening it if no handle is open. */
  acquire(name: string): NativeContext {
    let s = this.open.get(name);
    if (!s) {
      s = { context: this.openContext(name), refs: 0, subscribers: new Set(), watching: false };
      this.open.set(name, s);
    }
    s.refs++;
    return this.handle(name, s);
  }

  /** Open handles on `name` (tests). */
  refs(name: string): number {
    return this.open.get(name)?.refs ?? 0;
  }

  private handle(name: string, s: Shared): NativeContext {
    const c = s.context;
    let closed = false;
    let mine: AsyncHandler | undefined;
    return {
      name: () => c.name(),
      query: () => c.query(),
      queryPort: (port) => c.queryPort(port),
      allocPd: () => c.allocPd(),
      createCq: (cqe, completions, onWake, drainOnWake) => c.createCq(cqe, completions, onWake, drainOnWake),
      setRef: (ref) => c.setRef(ref),
      watchAsyncEvents: (onEvent) => {
        if (mine) s.subscribers.delete(mine);
        mine = onEvent;
        s.subscribers.add(onEvent);
        if (s.watching) return;
        // The fan-out holds only the subscriber set: each device's handler reaches its device through a
        // WeakRef (device.ts), so the native context's strong reference keeps no device alive.
        const subscribers = s.subscribers;
        c.watchAsyncEvents((type, element) => {
          for (const f of [...subscribers]) f(type, element);
        });
        s.watching = true;
      },
      close: () => {
        if (closed) return;
        // The last handle closes the context; if that throws (children still live), nothing changed.
        if (s.refs === 1) c.close();
        closed = true;
        s.refs--;
        if (mine) s.subscribers.delete(mine);
        if (s.refs === 0 && this.open.get(name) === s) this.open.delete(name);
      },
    };
  }
}
