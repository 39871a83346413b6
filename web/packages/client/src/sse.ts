/** One server-sent event: its id: (the cursor) and its joined data: lines. */
export interface SSEMessage {
  id: string;
  data: string;
}

/**
 * readSSE parses a text/event-stream body (the WHATWG rules: \n, \r\n or \r
 * line ends, comments ignored, data: lines joined) and calls onMessage for
 * each event that has data, in order; a promise it returns is awaited.
 */
export async function readSSE(body: ReadableStream<Uint8Array>, onMessage: (m: SSEMessage) => void | Promise<void>): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let id = '';
  let data: string[] = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      for (;;) {
        const m = /\r\n|\r|\n/.exec(buf);
        if (!m || (m[0] === '\r' && m.index === buf.length - 1)) break; // maybe a \r\n split across chunks
        const line = buf.slice(0, m.index);
        buf = buf.slice(m.index + m[0].length);
        if (line === '') {
          if (data.length) await onMessage({ id, data: data.join('\n') });
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
  } finally {
    reader.releaseLock();
  }
}
