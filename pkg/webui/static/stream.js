// stream.js: one chat's event stream. It reads SSE through fetch() (so it can
// send the Authorization header, which EventSource cannot), remembers the
// cursor (the SSE id:) of the last event it handled, and reconnects with it
// as Last-Event-ID after a drop, so the server sends only what is new.

const MIN_DELAY_MS = 250;
const MAX_DELAY_MS = 15000;

export class ChatStream {
  // onEvent(ev) handles one decoded event; onState(state, detail) reports
  // "connecting" | "live" | "waiting" (detail: ms until the next attempt);
  // onRestart() is called before a connection without a cursor (the client
  // must forget what it showed); onFatal(status, message) ends the stream.
  constructor({ chatId, token, onEvent, onState, onRestart, onFatal }) {
    Object.assign(this, { chatId, token, onEvent, onState, onRestart, onFatal });
    this.cursor = '';
    this.connects = 0;
    this.stopped = true;
  }

  start() {
    this.stopped = false;
    this.run();
  }

  stop() {
    this.stopped = true;
    this.ctrl?.abort();
    this.wake?.();
  }

  // drop ends the current connection as a network failure would; the
  // stream reconnects with its cursor.
  drop() {
    this.ctrl?.abort();
  }

  async run() {
    let idle = 0; // consecutive connections that delivered no event
    while (!this.stopped) {
      const delivered = await this.connect();
      if (this.stopped || delivered === null) return;
      idle = delivered ? 0 : idle + 1;
      const base = Math.min(MIN_DELAY_MS * 2 ** idle, MAX_DELAY_MS);
      const delay = Math.round(base * (0.8 + Math.random() * 0.4));
      this.onState('waiting', delay);
      await new Promise((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, delay);
      });
    }
  }

  // connect runs one connection until it ends. It returns whether any event
  // arrived, or null when the stream must not reconnect.
  async connect() {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    let delivered = false;
    try {
      this.onState('connecting');
      if (!this.cursor) this.onRestart();
      const headers = { Authorization: `Bearer ${this.token}`, Accept: 'text/event-stream' };
      if (this.cursor) headers['Last-Event-ID'] = this.cursor;
      const resp = await fetch(`/api/v2/chats/${encodeURIComponent(this.chatId)}/stream`, {
        headers, signal: ctrl.signal, cache: 'no-store',
      });
      if (resp.status === 400 && this.cursor) {
        this.cursor = ''; // the server refused our position: start over
        return false;
      }
      if (resp.status === 401 || resp.status === 404) {
        const body = await resp.json().catch(() => ({}));
        this.stopped = true;
        this.onFatal(resp.status, body.message || `HTTP ${resp.status}`);
        return null;
      }
      if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
      this.connects++;
      this.onState('live');
      await readSSE(resp.body, (id, data) => {
        delivered = true;
        let ev;
        try { ev = JSON.parse(data); } catch { return; }
        this.onEvent(ev);
        if (id) this.cursor = id; // only after the event was applied
      });
    } catch (err) {
      if (!ctrl.signal.aborted) console.warn('chat stream:', err);
    }
    return delivered;
  }
}

// readSSE parses a text/event-stream body and calls onMessage(id, data) for
// each event with data. Comments (heartbeats) are ignored.
export async function readSSE(body, onMessage) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let id = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    for (;;) {
      const m = /\r\n|\r|\n/.exec(buf);
      if (!m || (m[0] === '\r' && m.index === buf.length - 1)) break; // maybe \r\n split across chunks
      const line = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      if (line === '') {
        if (data.length) onMessage(id, data.join('\n'));
        data = [];
        continue;
      }
      if (line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      let v = i < 0 ? '' : line.slice(i + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'data') data.push(v);
      else if (field === 'id' && !v.includes('\0')) id = v;
    }
  }
}
