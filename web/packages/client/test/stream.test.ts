import { afterEach, describe, expect, it } from 'vitest';
import { ChatStream, ChatdClient, applyEvent, emptyChatState, type ChatState, type ChatdError, type StreamEvent, type StreamEventType } from '../src';
import { FakeStream, loadFixture, type Plan } from './fakeserver';
import { waitFor } from './live';

const fixture = loadFixture();
const chatId = (JSON.parse(fixture[0].data) as StreamEvent).chat_id;
const replay = (events = fixture) => events.reduce<ChatState>((s, e) => applyEvent(s, JSON.parse(e.data)), emptyChatState(chatId));

let servers: FakeStream[] = [];
let streams: ChatStream[] = [];
afterEach(async () => {
  streams.forEach((s) => s.stop());
  await Promise.all(servers.map((s) => s.close()));
  servers = [];
  streams = [];
});

async function run(plan: Plan, opts: { cursor?: string } = {}) {
  const srv = new FakeStream(fixture, plan);
  servers.push(srv);
  const client = new ChatdClient({ baseUrl: await srv.listen(), token: 'tok' });
  const seen: string[] = []; // the cursor of every applied event
  let state = emptyChatState(chatId);
  let resets = 0;
  let fatal: ChatdError | null = null;
  const delays: number[] = [];
  const stream = new ChatStream(client, chatId, {
    cursor: opts.cursor,
    minDelayMs: 1, maxDelayMs: 8, random: () => 0.5,
    onEvent: (ev) => { seen.push(ev.cursor ?? ''); state = applyEvent(state, ev); },
    onReset: () => { resets++; seen.length = 0; state = emptyChatState(chatId); },
    onState: (s, d) => { if (s === 'waiting') delays.push(d ?? -1); },
    onFatal: (e) => { fatal = e; },
  });
  streams.push(stream);
  stream.start();
  return { srv, stream, seen: () => seen, state: () => state, resets: () => resets, fatal: () => fatal, delays };
}

const types = [...new Set(fixture.map((e) => (JSON.parse(e.data) as StreamEvent).type))] as StreamEventType[];

describe('the recorded fixture', () => {
  it('holds every event type, each event with its cursor', () => {
    expect(types.sort()).toEqual(['action_required', 'error', 'history_reset', 'message', 'message_part', 'preview_reset', 'queue_update', 'retry', 'status']);
    for (const e of fixture) expect(e.id).toBe((JSON.parse(e.data) as StreamEvent).cursor);
  });
});

describe('ChatStream resumes from its cursor', () => {
  it('delivers the whole stream once without cuts', async () => {
    const r = await run({});
    await waitFor('every event', () => r.seen().length === fixture.length);
    expect(r.seen()).toEqual(fixture.map((e) => e.id));
    expect(r.state()).toEqual(replay());
    expect(r.srv.requests).toEqual(['']);
  });

  for (const type of types) {
    it(`through a disconnect after each ${type} event and inside the next one`, async () => {
      const at = fixture.flatMap((e, i) => ((JSON.parse(e.data) as StreamEvent).type === type ? [i] : []));
      const inside = new Set(at.map((i) => i + 1).filter((i) => i < fixture.length));
      const r = await run({ cutAfter: new Set(at), cutInside: inside });
      await waitFor('every event', () => r.seen().length === fixture.length);
      // Every event exactly once, in order: nothing doubled, nothing dropped.
      expect(r.seen()).toEqual(fixture.map((e) => e.id));
      expect(r.state()).toEqual(replay());
      // Each reconnect asked for what came after the last applied event.
      await waitFor('a reconnect after every cut', () => r.srv.requests.length > at.length && r.stream.state === 'live');
      expect(r.seen().length).toBe(fixture.length); // nothing more came after the reconnects
      for (const c of r.srv.requests.filter(Boolean)) expect(fixture.map((e) => e.id), `cursor ${c} of ${JSON.stringify(r.srv.requests)}`).toContain(c);
      // Only connections without a cursor started from nothing.
      expect(r.resets()).toBe(r.srv.requests.filter((c) => c === '').length);
      expect(r.srv.requests.filter((c) => c !== '').length).toBeGreaterThan(0);
    });
  }

  it('starts over when the server refuses its cursor', async () => {
    const r = await run({}, { cursor: 'not-a-cursor-it-gave' });
    await waitFor('every event', () => r.seen().length === fixture.length);
    expect(r.srv.requests).toEqual(['not-a-cursor-it-gave', '']);
    expect(r.resets()).toBe(1);
    expect(r.state()).toEqual(replay());
  });

  it('resumes a saved cursor without replaying what came before it', async () => {
    const half = Math.floor(fixture.length / 2);
    const r = await run({}, { cursor: fixture[half].id });
    await waitFor('the rest', () => r.seen().length === fixture.length - half - 1);
    expect(r.seen()).toEqual(fixture.slice(half + 1).map((e) => e.id));
    expect(r.resets()).toBe(0);
  });

  it('backs off exponentially, bounded, while the server is down', async () => {
    const r = await run({ refuse: { status: 503, times: 6 } });
    await waitFor('every event', () => r.seen().length === fixture.length);
    expect(r.delays).toEqual([2, 4, 8, 8, 8, 8]);
  });

  it('stops for good on a refused token, with the typed error', async () => {
    const r = await run({ refuse: { status: 401, times: 1, body: { message: 'token expired', code: 'unauthenticated', reason: 'TOKEN_EXPIRED' } } });
    await waitFor('the fatal error', () => r.fatal() !== null);
    const err = r.fatal()!;
    expect([err.status, err.code, err.reason, err.message]).toEqual([401, 'unauthenticated', 'TOKEN_EXPIRED', 'token expired']);
    expect(r.stream.state).toBe('closed');
    expect(r.srv.requests).toEqual(['']);
  });
});
