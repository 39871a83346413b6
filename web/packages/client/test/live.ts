// Helpers for the live tests (vitest.live.config.ts): they run against a
// real chatd whose single origin and token come from CHATD_LIVE_URL and
// CHATD_LIVE_TOKEN (cmd/browsertest's TestClientLive starts the four
// services and runs them).
import { ChatdClient, textOf, type StreamEvent } from '../src';

export function liveClient(): ChatdClient {
  const baseUrl = process.env.CHATD_LIVE_URL;
  const token = process.env.CHATD_LIVE_TOKEN;
  if (!baseUrl || !token) throw new Error('set CHATD_LIVE_URL and CHATD_LIVE_TOKEN (cmd/browsertest TestClientLive does)');
  return new ChatdClient({ baseUrl, token });
}

/** A new chat with the dynamic tool `lookup` the conversation calls. */
export function toolChat(client: ChatdClient, title: string) {
  return client.createChat({
    title,
    dynamic_tools: [{ name: 'lookup', description: 'Look something up', input_schema: { type: 'object' } as never }],
  });
}

/** Polls cond every 20 ms until it holds or the deadline passes. */
export async function waitFor(what: string, cond: () => boolean, timeoutMs = 30000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const tokens = (n: number) => Array.from({ length: n }, (_, i) => `tok${i + 1}`).join(' ');

/**
 * converse drives one scripted conversation that produces every stream
 * event type: a streamed reply with reasoning, a retried failure, a
 * dynamic tool call with a message queued behind it, an edit
 * (history_reset) and a fatal error.
 * events() is what the caller's stream has delivered so far.
 */
export async function converse(client: ChatdClient, chat: { id?: string }, events: () => StreamEvent[]): Promise<void> {
  const count = (t: string) => events().filter((e) => e.type === t).length;
  const status = () => [...events()].reverse().find((e) => e.type === 'status') as Extract<StreamEvent, { type: 'status' }> | undefined;
  const waiting = async (what: string, n: number) =>
    waitFor(what, () => count('message') >= n && status()?.status.status === 'waiting');

  // A streamed reply with reasoning (message_part, message, status).
  await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::think pondering\n::stream 12 40' }] });
  // A stream cut mid-reply resumes with the reply's parts coalesced (or,
  // once it ended, with the message alone), so one part is all a cut
  // caller is sure to see.
  await waitFor('the reply streaming', () => count('message_part') > 0);
  await waiting('the reply', 2);
  // retry + preview_reset: a retryable failure, then a reply.
  await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::fail retryable 1\n::stream 5 0' }] });
  await waiting('the recovered reply', 4);
  // action_required: a dynamic tool call. queue_update: a message sent
  // while the chat waits for the call's result is queued, whatever the
  // timing (a message sent while a reply streams is queued only if it
  // arrives before the reply ends).
  await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::tool lookup {"q":"x"}' }] });
  await waitFor('the tool call', () => count('action_required') > 0 && status()?.status.status === 'requires_action');
  const queued = await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::reply queued one' }], busy_behavior: 'queue' });
  if (!queued.queued) throw new Error('a message sent while the chat waited for a tool result was not queued');
  await waitFor('the queued message', () => count('queue_update') > 0);
  const call = (events().find((e) => e.type === 'action_required') as Extract<StreamEvent, { type: 'action_required' }>).action_required.tool_calls![0];
  await client.submitToolResults(chat.id!, [{ tool_call_id: call.tool_call_id, output: { answer: 42 } as never }]);
  await waitFor('the reply after the tool', () => events().some((e) => e.type === 'message' && textOf(e.message.content) === 'done'));
  await waitFor('the queued reply', () => events().some((e) => e.type === 'message' && textOf(e.message.content) === 'queued one'));
  await waitFor('waiting after the tool and the queue', () => status()?.status.status === 'waiting');
  // history_reset: an edit of the first message.
  const first = events().find((e) => e.type === 'message' && e.message.role === 'user') as Extract<StreamEvent, { type: 'message' }>;
  await client.editMessage(chat.id!, String(first.message.id), { content: [{ type: 'text', text: '::stream 6 0' }] });
  await waitFor('the edited history', () => count('history_reset') > 0 && events().some((e) => e.type === 'message' && textOf(e.message.content) === tokens(6)));
  await waitFor('waiting after the edit', () => status()?.status.status === 'waiting');
  // error: a fatal failure.
  await client.sendMessage(chat.id!, { content: [{ type: 'text', text: '::fail fatal' }] });
  await waitFor('the error', () => count('error') > 0 && status()?.status.status === 'error');
}
