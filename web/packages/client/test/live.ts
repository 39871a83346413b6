// Helpers for the live tests (vitest.live.config.ts): they run against a
// real chatd whose single origin and token come from CHATD_LIVE_URL and
// CHATD_LIVE_TOKEN (cmd/browsertest's TestClientLive starts the four
// services and runs them).
import { ChatdClient } from '../src';

export function liveClient(): ChatdClient {
  const baseUrl = process.env.CHATD_LIVE_URL;
  const token = process.env.CHATD_LIVE_TOKEN;
  if (!baseUrl || !token) throw new Error('set CHATD_LIVE_URL and CHATD_LIVE_TOKEN (cmd/browsertest TestClientLive does)');
  return new ChatdClient({ baseUrl, token });
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
