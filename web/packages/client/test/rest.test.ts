import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChatdClient, ChatdError } from '../src';

// A tiny server that records requests and answers like chatd's REST facade.
const seen: { method: string; url: string; auth: string; body: string; ctype: string }[] = [];
const server = createServer((req, res) => {
  let body = '';
  req.on('data', (c) => (body += c));
  req.on('end', () => {
    seen.push({ method: req.method!, url: req.url!, auth: String(req.headers.authorization), body, ctype: String(req.headers['content-type'] ?? '') });
    res.setHeader('Content-Type', 'application/json');
    if (req.url!.startsWith('/api/v2/chats/missing')) {
      res.statusCode = 404;
      res.end(JSON.stringify({ message: 'chat not found', code: 'not_found', reason: 'CHAT_NOT_FOUND' }));
    } else if (req.url === '/api/v2/chats/c1/interrupt') {
      res.statusCode = 409;
      res.end(JSON.stringify({ message: 'the chat is not running', code: 'failed_precondition', reason: 'NOT_RUNNING', detail: { status: 'waiting' } }));
    } else if (req.url!.startsWith('/api/v2/files')) {
      res.statusCode = 201;
      res.end(JSON.stringify({ id: 'f1', name: 'a.png', media_type: 'image/png', size: 3, created_at: '2026-01-01T00:00:00Z' }));
    } else if (req.url!.startsWith('/api/v2/chats?')) {
      const page = new URL(req.url!, 'http://x').searchParams.get('page_token');
      res.end(JSON.stringify(page ? { chats: [{ id: 'b' }] } : { chats: [{ id: 'a' }], next_page_token: 'p2' }));
    } else {
      res.end(JSON.stringify({ message: { id: '9007199254740993', role: 'user' } }));
    }
  });
});
let client: ChatdClient;
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  // A JWT-shaped token whose payload carries org (unsigned: the client only reads it).
  const payload = Buffer.from(JSON.stringify({ sub: 'u', org: 'org-1' })).toString('base64url');
  client = new ChatdClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, token: `h.${payload}.s` });
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('ChatdClient', () => {
  it('sends the token, JSON and an idempotency key, and keeps 64-bit ids as strings', async () => {
    const r = await client.sendMessage('c1', { content: [{ type: 'text', text: 'hi' }], busy_behavior: 'queue' });
    expect(r.message?.id).toBe('9007199254740993');
    const req = seen.at(-1)!;
    expect([req.method, req.url, req.auth, req.ctype]).toEqual(['POST', '/api/v2/chats/c1/messages', `Bearer ${client.token}`, 'application/json']);
    const body = JSON.parse(req.body);
    expect(body.busy_behavior).toBe('queue');
    expect(body.request_id).toMatch(/^[0-9a-f-]{32,36}$/);
  });

  it('throws ChatdError with status, code, reason and detail', async () => {
    const err = await client.interrupt('c1').catch((e) => e);
    expect(err).toBeInstanceOf(ChatdError);
    expect([err.status, err.code, err.reason, err.message, err.detail]).toEqual([409, 'failed_precondition', 'NOT_RUNNING', 'the chat is not running', { status: 'waiting' }]);
    const nf = await client.getChat('missing').catch((e) => e);
    expect([nf.status, nf.code, nf.reason]).toEqual([404, 'not_found', 'CHAT_NOT_FOUND']);
  });

  it('escapes path parameters and reads the organization from the token', async () => {
    await client.editMessage('c/1', '5', { content: [] });
    expect(seen.at(-1)!.url).toBe('/api/v2/chats/c%2F1/messages/5');
    expect([seen.at(-1)!.method]).toEqual(['PATCH']);
    await client.listModels();
    expect(seen.at(-1)!.url).toBe('/api/v2/organizations/org-1/chats/models');
  });

  it('pages through every chat', async () => {
    expect((await client.listAllChats({ archived: false })).map((c) => c.id)).toEqual(['a', 'b']);
    expect(seen.at(-1)!.url).toBe('/api/v2/chats?archived=false&page_size=200&page_token=p2');
  });

  it('uploads raw bytes with their media type and name', async () => {
    const f = await client.uploadFile(new Blob([new Uint8Array([1, 2, 3])], { type: 'image/png' }), 'a b.png');
    expect(f.id).toBe('f1');
    expect([seen.at(-1)!.url, seen.at(-1)!.ctype, seen.at(-1)!.body.length]).toEqual(['/api/v2/files?name=a%20b.png', 'image/png', 3]);
  });

  it('reports an unreachable server as a ChatdError', async () => {
    const c = new ChatdClient({ baseUrl: 'http://127.0.0.1:1', token: 't' });
    const err = await c.listChats().catch((e) => e);
    expect([err.status, err.code]).toEqual([0, 'unavailable']);
  });
});
