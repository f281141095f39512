/**
 * What a scenario talks to: an NFS service on loopback. Either nfs-ganesha itself (the "direct" target) or
 * a chain in front of it (gateway → RDMA → responder → ganesha); the scenario cannot tell which, which is
 * the point.
 */
export interface NfsEndpoint {
  host: string;
  /** NFS program (100003) port. */
  nfsPort: number;
  /** MOUNT program (100005) port; undefined when the service is NFSv4-only. */
  mountPort: number | undefined;
  /** The export's path in URLs (NFSv4 pseudo path; NFSv3 mounts it too: ganesha `Mount_Path_Pseudo`). */
  exportPath: string;
}

/** RFC 5665 universal address of a TCP endpoint, `h1.h2.h3.h4.p1.p2`, as `rpcinfo -a` takes it. */
export function universalAddress(host: string, port: number): string {
  return `${host}.${port >> 8}.${port & 0xff}`;
}
