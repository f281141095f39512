/**
 * A minimal reader for tshark's PDML (`tshark -T pdml`): the fields and protocols of one frame with their
 * byte position in the frame, so tests can compare our decoding with Wireshark's.
 */
import { readFileSync } from 'node:fs';

export interface PdmlNode {
  kind: 'proto' | 'field';
  name: string;
  /** Byte offset in the frame. */
  pos: number;
  size: number;
  show: string;
}

const TAG = /<(proto|field)\s([^>]*?)\/?>/g;
const ATTR = /([\w.-]+)="([^"]*)"/g;

export function readPdml(path: string): PdmlNode[] {
  const xml = readFileSync(path, 'utf8');
  const nodes: PdmlNode[] = [];
  for (const tag of xml.matchAll(TAG)) {
    const attrs = new Map<string, string>();
    for (const a of tag[2].matchAll(ATTR)) attrs.set(a[1], a[2]);
    nodes.push({
      kind: tag[1] as 'proto' | 'field',
      name: attrs.get('name') ?? '',
      pos: Number(attrs.get('pos') ?? Number.NaN),
      size: Number(attrs.get('size') ?? Number.NaN),
      show: attrs.get('show') ?? '',
    });
  }
  return nodes;
}

/** The nodes named `name` that cover bytes (tshark's generated fields have size 0), in frame order. */
export function fields(nodes: PdmlNode[], name: string): PdmlNode[] {
  return nodes.filter((n) => n.name === name && n.size > 0);
}

/** The one byte-covering node named `name`; throws when there is not exactly one. */
export function field(nodes: PdmlNode[], name: string): PdmlNode {
  const found = fields(nodes, name);
  if (found.length !== 1) throw new Error(`expected one ${name} in the PDML, found ${found.length}`);
  return found[0];
}

export function proto(nodes: PdmlNode[], name: string): PdmlNode {
  const found = nodes.filter((n) => n.kind === 'proto' && n.name === name);
  if (found.length !== 1) throw new Error(`expected one <proto name="${name}">, found ${found.length}`);
  return found[0];
}
