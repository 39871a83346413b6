import { createContext, createElement, useContext, useEffect, useMemo, useState, useSyncExternalStore, type ReactNode } from 'react';
import type { ChatdClient } from '@chatd/client';
import { ChatController, type ChatControllerOptions, type ChatSnapshot } from './controller';

const ClientContext = createContext<ChatdClient | null>(null);

/** Makes a ChatdClient available to useChat below it. */
export function ChatdProvider({ client, children }: { client: ChatdClient; children?: ReactNode }) {
  return createElement(ClientContext.Provider, { value: client }, children);
}

export function useChatdClient(): ChatdClient {
  const c = useContext(ClientContext);
  if (!c) throw new Error('useChat needs a client: wrap the app in <ChatdProvider client={...}> or pass options.client');
  return c;
}

export interface UseChatOptions extends ChatControllerOptions {
  client?: ChatdClient;
}

export type UseChatResult = ChatSnapshot & {
  /** Milliseconds until the pending retry (0 when none or due). */
  retryInMs: number;
  send: ChatController['send'];
  interrupt: ChatController['interrupt'];
  edit: ChatController['edit'];
  regenerate: ChatController['regenerate'];
  deleteQueued: ChatController['deleteQueued'];
  promoteQueued: ChatController['promoteQueued'];
  submitToolResults: ChatController['submitToolResults'];
  upload: ChatController['upload'];
  clearError: ChatController['clearError'];
  /** The controller itself (its stream, for diagnostics). */
  controller: ChatController | null;
};

const idle: ChatSnapshot = {
  chatId: '', messages: [], live: null, retired: ['0', '0'], status: '', queue: [], toolCalls: [], retry: null, error: null,
  connection: 'closed', reconnectInMs: 0, lastError: null, busy: false,
};
const noop = () => () => {};
const rejectNoChat = () => Promise.reject(new Error('no chat selected'));

/**
 * useChat(chatId) streams one chat: its committed messages, the live
 * assistant message, status, queue, errors and retry countdown, and the
 * operations on it. It reconnects from its cursor after network loss and,
 * with sessionStorage, after a reload. chatId null shows nothing.
 */
export function useChat(chatId: string | null | undefined, options: UseChatOptions = {}): UseChatResult {
  const fromContext = useContext(ClientContext);
  const client = options.client ?? fromContext;
  if (!client) throw new Error('useChat needs a client: wrap the app in <ChatdProvider client={...}> or pass options.client');
  const { storage, stream, onUnauthenticated } = options;
  const ctl = useMemo(
    () => (chatId ? new ChatController(client, chatId, { storage, stream, onUnauthenticated }) : null),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [client, chatId],
  );
  useEffect(() => {
    if (!ctl) return;
    ctl.start();
    const save = () => ctl.save();
    const online = () => ctl.stream.reconnectNow();
    globalThis.addEventListener?.('pagehide', save);
    globalThis.addEventListener?.('online', online);
    return () => {
      globalThis.removeEventListener?.('pagehide', save);
      globalThis.removeEventListener?.('online', online);
      ctl.stop();
    };
  }, [ctl]);
  const snap = useSyncExternalStore(ctl ? ctl.subscribe : noop, ctl ? ctl.getSnapshot : () => idle, ctl ? ctl.getSnapshot : () => idle);
  const retryInMs = useCountdown(snap.retry?.retrying_at);
  return {
    ...snap,
    retryInMs,
    controller: ctl,
    send: ctl?.send ?? rejectNoChat,
    interrupt: ctl?.interrupt ?? rejectNoChat,
    edit: ctl?.edit ?? rejectNoChat,
    regenerate: ctl?.regenerate ?? rejectNoChat,
    deleteQueued: ctl?.deleteQueued ?? rejectNoChat,
    promoteQueued: ctl?.promoteQueued ?? rejectNoChat,
    submitToolResults: ctl?.submitToolResults ?? rejectNoChat,
    upload: ctl?.upload ?? rejectNoChat,
    clearError: ctl?.clearError ?? (() => {}),
  };
}

/** Milliseconds left until `at` (an RFC 3339 time), ticking every 250 ms. */
export function useCountdown(at: string | undefined): number {
  const target = at ? Date.parse(at) : NaN;
  const [now, setNow] = useState(() => Date.now());
  useEffect(() => {
    if (Number.isNaN(target)) return;
    setNow(Date.now());
    const t = setInterval(() => setNow(Date.now()), 250);
    return () => clearInterval(t);
  }, [target]);
  return Number.isNaN(target) ? 0 : Math.max(0, target - now);
}
