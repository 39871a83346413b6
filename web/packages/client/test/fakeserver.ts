// A stand-in chat stream for unit tests: it serves a recorded SSE fixture,
// honours Last-Event-ID (sends only the events after it) and can cut the
// connection after chosen events, mid-event, or refuse requests, as a
// network or a restarted server would.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface FixtureEvent {
  id: string;
  data: string;
}

export function loadFixture(name = 'stream.sse'): FixtureEvent[] {
  const text = readFileSync(fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url)), 'utf8');
  return text.split('\n\n').filter((b) => b.trim()).map((block) => {
    let id = '';
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('id: ')) id = line.slice(4);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    return { id, data: data.join('\n') };
  });
}

export interface Plan {
  /** Cut the connection right after the event at these fixture indexes (once each). */
  cutAfter?: Set<number>;
  /** Cut in the middle of the event at these indexes (half of it written, once each). */
  cutInside?: Set<number>;
  /** Answer the first n requests with this status instead. */
  refuse?: { status: number; times: number; body?: object };
}

export class FakeStream {
  server: Server;
  url = '';
  /** The Last-Event-ID of every request, in order ("" for none). */
  requests: string[] = [];
  private open = new Set<ServerResponse>();

  constructor(readonly events: FixtureEvent[], readonly plan: Plan = {}) {
    this.server = createServer((req, res) => {
      const cursor = String(req.headers['last-event-id'] ?? '');
      this.requests.push(cursor);
      const refuse = this.plan.refuse;
      if (refuse && refuse.times > 0) {
        refuse.times--;
        res.writeHead(refuse.status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(refuse.body ?? { message: 'refused', code: 'unavailable', reason: '' }));
        return;
      }
      let start = 0;
      if (cursor) {
        const i = this.events.findIndex((e) => e.id === cursor);
        if (i < 0) {
          res.writeHead(400, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify({ message: 'the cursor is not one this stream gave out', code: 'invalid_argument', reason: 'INVALID_CURSOR' }));
          return;
        }
        start = i + 1;
      }
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store' });
      res.write(': hello\n\n');
      this.open.add(res);
      res.on('close', () => this.open.delete(res));
      for (let i = start; i < this.events.length; i++) {
        const e = this.events[i];
        const frame = `id: ${e.id}\ndata: ${e.data}\n\n`;
        if (this.plan.cutInside?.delete(i)) {
          res.write(frame.slice(0, Math.floor(frame.length / 2)));
          res.destroy();
          return;
        }
        res.write(frame);
        if (this.plan.cutAfter?.delete(i)) {
          // Drop the connection once the event is on the wire, as a network
          // failure would (data still in flight is lost with it).
          setTimeout(() => res.destroy(), 10);
          return;
        }
      }
      // The end of the recording: stay open with heartbeats, as the server does.
    });
  }

  async listen(): Promise<string> {
    await new Promise<void>((r) => this.server.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async close(): Promise<void> {
    for (const r of this.open) r.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}
