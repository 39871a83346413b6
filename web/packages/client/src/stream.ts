// The chat stream over SSE, read with fetch (so it sends the Authorization
// header, which EventSource cannot, and runs in Node as in the browser).
// It remembers the cursor (SSE id:) of the last event it delivered and
// reconnects with it as Last-Event-ID after any drop, with bounded,
// jittered exponential backoff; the server then sends only what is new, so
// no event is shown twice or skipped.
import type { ChatdClient } from './rest';
import { ChatdError, errorFrom } from './errors';
import { readSSE } from './sse';
import type { StreamEvent } from './types';

export type ConnectionState = 'connecting' | 'live' | 'waiting' | 'closed';

export interface ChatStreamOptions {
  /** Resume after this cursor (e.g. one saved before a page reload). */
  cursor?: string;
  /** Called with each event, in order; the cursor advances after it returns. */
  onEvent: (ev: StreamEvent) => void;
  /**
   * Called before a connection that starts from nothing (no cursor, or the
   * server refused the saved one): forget everything shown so far.
   */
  onReset?: () => void;
  /** Connection state; `waiting` comes with the delay before the next attempt. */
  onState?: (state: ConnectionState, delayMs?: number) => void;
  /** The stream stopped for good (401, 403, 404): reconnecting cannot help. */
  onFatal?: (err: ChatdError) => void;
  /** Backoff bounds (defaults 250 ms and 15 s). */
  minDelayMs?: number;
  maxDelayMs?: number;
  /** A random number in [0, 1) for the jitter (tests pass a fixed one). */
  random?: () => number;
}

export class ChatStream {
  cursor: string;
  /** Connections that reached the server (for tests and diagnostics). */
  connects = 0;
  state: ConnectionState = 'closed';
  private stopped = true;
  private ctrl: AbortController | null = null;
  private wake: (() => void) | null = null;
  private readonly opts: Required<Omit<ChatStreamOptions, 'cursor'>>;

  constructor(private readonly client: ChatdClient, readonly chatId: string, opts: ChatStreamOptions) {
    this.cursor = opts.cursor ?? '';
    this.opts = {
      onReset: () => {}, onState: () => {}, onFatal: () => {}, minDelayMs: 250, maxDelayMs: 15000, random: Math.random,
      ...opts,
    };
  }

  /** Starts (or restarts after stop) the connection loop. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.run();
  }

  /** Ends the stream; no reconnect. */
  stop(): void {
    this.stopped = true;
    this.ctrl?.abort();
    this.wake?.();
    this.setState('closed');
  }

  /** Cuts the current connection as a network failure would; it reconnects from the cursor. */
  drop(): void {
    this.ctrl?.abort();
  }

  /** Skips the current backoff wait (e.g. when the browser comes back online). */
  reconnectNow(): void {
    this.wake?.();
  }

  private setState(s: ConnectionState, delay?: number) {
    this.state = s;
    this.opts.onState(s, delay);
  }

  private async run() {
    let idle = 0; // consecutive connections that delivered nothing
    while (!this.stopped) {
      const delivered = await this.connect();
      if (this.stopped || delivered === null) return;
      idle = delivered ? 0 : idle + 1;
      const { minDelayMs, maxDelayMs, random } = this.opts;
      const base = Math.min(minDelayMs * 2 ** Math.min(idle, 16), maxDelayMs);
      const delay = Math.round(base * (0.8 + random() * 0.4));
      this.setState('waiting', delay);
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, delay);
        this.wake = () => { clearTimeout(t); resolve(); };
      });
      this.wake = null;
    }
  }

  /** One connection: whether any event arrived, or null to stop for good. */
  private async connect(): Promise<boolean | null> {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    let delivered = false;
    try {
      this.setState('connecting');
      if (!this.cursor) this.opts.onReset();
      const headers: Record<string, string> = { Authorization: `Bearer ${this.client.token}`, Accept: 'text/event-stream' };
      if (this.cursor) headers['Last-Event-ID'] = this.cursor;
      const resp = await this.client.fetch(`${this.client.baseUrl}/api/v2/chats/${encodeURIComponent(this.chatId)}/stream`, {
        headers, signal: ctrl.signal, cache: 'no-store',
      });
      if (resp.status === 400 && this.cursor) {
        await resp.body?.cancel();
        this.cursor = ''; // the server refused our position: start over
        return false;
      }
      if (resp.status === 401 || resp.status === 403 || resp.status === 404) {
        const err = await errorFrom(resp);
        this.stopped = true;
        this.setState('closed');
        this.opts.onFatal(err);
        return null;
      }
      if (!resp.ok || !resp.body) {
        await resp.body?.cancel();
        return false;
      }
      this.connects++;
      this.setState('live');
      await readSSE(resp.body, ({ id, data }) => {
        if (ctrl.signal.aborted) return;
        let ev: StreamEvent;
        try {
          ev = JSON.parse(data) as StreamEvent;
        } catch {
          return;
        }
        delivered = true;
        this.opts.onEvent(ev);
        const cur = id || ev.cursor;
        if (cur) this.cursor = cur; // only once the event was applied
      });
    } catch {
      // A network failure, a cut body or drop(): the loop reconnects.
    } finally {
      ctrl.abort();
    }
    return delivered;
  }
}
