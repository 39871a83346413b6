// @vitest-environment jsdom
import { act, cleanup, renderHook, waitFor } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Blob as NodeBlob } from 'node:buffer';
import { ChatdClient, textOf } from '@chatd/client';
import { useChat } from '../src';

// A chat server for the hook: the stream serves `events` after the
// Last-Event-ID it is given and stays open; POSTs are recorded and can push
// new events to open streams, as chatd would.
class Server {
  events: { id: string; data: string }[] = [];
  posts: { url: string; body: any }[] = [];
  streams = new Set<ServerResponse>();
  cursors: string[] = [];
  onPost: (url: string, body: any) => { status?: number; json: object } = () => ({ json: {} });
  srv = createServer((req, res) => this.handle(req, res));
  url = '';

  async start() {
    await new Promise<void>((r) => this.srv.listen(0, '127.0.0.1', r));
    this.url = `http://127.0.0.1:${(this.srv.address() as AddressInfo).port}`;
  }
  stop() {
    this.srv.closeAllConnections();
    this.srv.close();
  }
  push(ev: { type: string; [payload: string]: unknown }) {
    const id = `c${this.events.length + 1}`;
    const data = JSON.stringify({ ...ev, chat_id: 'chat1', cursor: id });
    this.events.push({ id, data });
    for (const s of this.streams) s.write(`id: ${id}\ndata: ${data}\n\n`);
  }
  cut() {
    for (const s of this.streams) s.destroy();
  }
  handle(req: IncomingMessage, res: ServerResponse) {
    if (req.url!.endsWith('/stream')) {
      const cursor = String(req.headers['last-event-id'] ?? '');
      this.cursors.push(cursor);
      const from = cursor ? this.events.findIndex((e) => e.id === cursor) + 1 : 0;
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      for (const e of this.events.slice(from)) res.write(`id: ${e.id}\ndata: ${e.data}\n\n`);
      this.streams.add(res);
      res.on('close', () => this.streams.delete(res));
      return;
    }
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const parsed = body && req.headers['content-type'] === 'application/json' ? JSON.parse(body) : body;
      this.posts.push({ url: req.url!, body: parsed });
      const r = this.onPost(req.url!, parsed);
      res.writeHead(r.status ?? 200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(r.json));
    });
  }
}

const user = (id: string, text: string) => ({ type: 'message', message: { id, chat_id: 'chat1', role: 'user', content: [{ type: 'text', text }] } });
const part = (seq: number, text: string) => ({ type: 'message_part', message_part: { role: 'assistant', part: { type: 'text', text }, history_version: '1', generation_attempt: '1', seq: String(seq) } });
const status = (s: string) => ({ type: 'status', status: { status: s } });

let server: Server;
afterEach(() => {
  cleanup();
  server?.stop();
  sessionStorage.clear();
});

async function setup() {
  server = new Server();
  await server.start();
  const client = new ChatdClient({ baseUrl: server.url, token: 'tok' });
  const opts = { client, stream: { minDelayMs: 1, maxDelayMs: 5 } };
  return { client, opts };
}

describe('useChat', () => {
  it('shows the live reply as it streams, then the committed message once, through a cut', async () => {
    const { opts } = await setup();
    server.push(status('waiting'));
    const { result } = renderHook(() => useChat('chat1', opts));
    await waitFor(() => expect(result.current.connection).toBe('live'));
    server.push(user('1', 'hi'));
    server.push(status('running'));
    server.push(part(1, 'Hel'));
    await waitFor(() => expect(result.current.live?.parts[0].text).toBe('Hel'));
    expect(result.current.busy).toBe(true);
    server.cut();
    server.push(part(2, 'lo')); // while disconnected
    await waitFor(() => expect(result.current.live?.parts[0].text).toBe('Hello'));
    expect(server.cursors).toEqual(['', 'c4']); // resumed after the last event it applied
    server.push({ type: 'message', message: { id: '2', chat_id: 'chat1', role: 'assistant', content: [{ type: 'text', text: 'Hello' }] } });
    server.push(status('waiting'));
    await waitFor(() => expect(result.current.status).toBe('waiting'));
    expect(result.current.live).toBeNull();
    expect(result.current.messages.map((m) => textOf(m.content))).toEqual(['hi', 'Hello']);
  });

  it('sends, queues while busy, edits, regenerates, interrupts and answers tools through the REST API', async () => {
    const { opts } = await setup();
    server.push(user('1', 'first'));
    server.push(status('running'));
    const { result } = renderHook(() => useChat('chat1', opts));
    await waitFor(() => expect(result.current.busy).toBe(true));
    await act(() => result.current.send('next'));
    expect(server.posts.at(-1)).toMatchObject({ url: '/api/v2/chats/chat1/messages', body: { busy_behavior: 'queue', content: [{ type: 'text', text: 'next' }] } });
    await act(() => result.current.send('now', { busy_behavior: 'interrupt' }));
    expect(server.posts.at(-1)!.body.busy_behavior).toBe('interrupt');
    await act(() => result.current.interrupt());
    await act(() => result.current.edit('1', 'changed'));
    expect(server.posts.at(-1)).toMatchObject({ url: '/api/v2/chats/chat1/messages/1', body: { content: [{ type: 'text', text: 'changed' }] } });
    await act(() => result.current.regenerate());
    expect(server.posts.at(-1)).toMatchObject({ url: '/api/v2/chats/chat1/messages/1', body: { content: [{ type: 'text', text: 'first' }] } });
    await act(() => result.current.promoteQueued('5'));
    await act(() => result.current.deleteQueued('6'));
    await act(() => result.current.submitToolResults([{ tool_call_id: 't1', output: { ok: true } as never }]));
    expect(server.posts.map((p) => p.url)).toEqual([
      '/api/v2/chats/chat1/messages', '/api/v2/chats/chat1/messages', '/api/v2/chats/chat1/interrupt',
      '/api/v2/chats/chat1/messages/1', '/api/v2/chats/chat1/messages/1',
      '/api/v2/chats/chat1/queue/5/promote', '/api/v2/chats/chat1/queue/6', '/api/v2/chats/chat1/tool-results',
    ]);
    expect(server.posts.at(-1)!.body).toEqual({ results: [{ tool_call_id: 't1', output: { ok: true } }] });
    server.onPost = () => ({ json: { id: 'f1', name: 'a.png', media_type: 'image/png', size: 1 } });
    let f: any;
    await act(async () => { f = await result.current.upload(new NodeBlob(['x'], { type: 'image/png' }) as unknown as Blob, 'a.png'); });
    await act(() => result.current.send({ text: 'look', files: [f] }));
    expect(server.posts.at(-1)!.body.content).toEqual([{ type: 'text', text: 'look' }, { type: 'file', file_id: 'f1', media_type: 'image/png', name: 'a.png' }]);
  });

  it('keeps the last refused request as a typed error', async () => {
    const { opts } = await setup();
    server.onPost = () => ({ status: 409, json: { message: 'the chat is not running', code: 'failed_precondition', reason: 'NOT_RUNNING' } });
    const { result } = renderHook(() => useChat('chat1', opts));
    await act(() => result.current.interrupt().catch(() => {}));
    expect([result.current.lastError?.status, result.current.lastError?.reason, result.current.lastError?.message]).toEqual([409, 'NOT_RUNNING', 'the chat is not running']);
    act(() => result.current.clearError());
    expect(result.current.lastError).toBeNull();
  });

  it('counts down to a pending retry', async () => {
    const { opts } = await setup();
    server.push(status('running'));
    server.push({ type: 'retry', retry: { attempt: 1, error: 'overloaded', retrying_at: new Date(Date.now() + 3000).toISOString() } });
    const { result } = renderHook(() => useChat('chat1', opts));
    await waitFor(() => expect(result.current.retry?.attempt).toBe(1));
    expect(result.current.retryInMs).toBeGreaterThan(1000);
    expect(result.current.retryInMs).toBeLessThanOrEqual(3000);
    const first = result.current.retryInMs;
    await waitFor(() => expect(result.current.retryInMs).toBeLessThan(first));
  });

  it('survives a reload: the next mount shows the saved state and resumes after its cursor', async () => {
    const { opts } = await setup();
    server.push(user('1', 'hi'));
    server.push(status('running'));
    server.push(part(1, 'Hel'));
    const first = renderHook(() => useChat('chat1', opts));
    await waitFor(() => expect(first.result.current.live?.parts[0].text).toBe('Hel'));
    first.unmount(); // pagehide/unmount saves {cursor, state}
    server.push(part(2, 'lo'));
    const second = renderHook(() => useChat('chat1', opts));
    expect(second.result.current.live?.parts[0].text).toBe('Hel'); // from storage, before any event
    await waitFor(() => expect(second.result.current.live?.parts[0].text).toBe('Hello'));
    expect(server.cursors).toEqual(['', 'c3']);
    expect(second.result.current.messages.map((m) => textOf(m.content))).toEqual(['hi']);
  });
});
