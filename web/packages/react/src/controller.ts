// ChatController owns one chat's stream and state outside React: useChat
// subscribes to it. It saves the state with the stream's cursor (in
// sessionStorage by default), so after a page reload it shows what it
// showed and resumes the stream after the cursor instead of from nothing.
import {
  ChatStream, ChatdError, applyEvent, emptyChatState, isBusy, textOf,
  type ChatState, type ChatStreamOptions, type ChatdClient, type ConnectionState, type MessagePart,
  type SendMessageBody, type SendMessageResponse, type ToolResult, type UploadedFile,
} from '@chatd/client';

export interface ChatSnapshot extends ChatState {
  connection: ConnectionState;
  /** Delay before the next reconnect attempt while connection is `waiting`. */
  reconnectInMs: number;
  /** The last failed request (send, edit, ...) or the stream's fatal error. */
  lastError: ChatdError | null;
  busy: boolean;
}

export interface ChatControllerOptions {
  /** Where to keep {cursor, state} across reloads; null to keep nothing. */
  storage?: Pick<Storage, 'getItem' | 'setItem' | 'removeItem'> | null;
  stream?: Pick<ChatStreamOptions, 'minDelayMs' | 'maxDelayMs' | 'random'>;
  /** Called when the stream stops for good because the token was refused. */
  onUnauthenticated?: (err: ChatdError) => void;
}

export type SendInput = string | { text?: string; files?: UploadedFile[]; parts?: MessagePart[] };

/** The parts of a message: its text, then a file part per attachment. */
export function partsOf(input: SendInput): MessagePart[] {
  if (typeof input === 'string') return [{ type: 'text', text: input }];
  if (input.parts) return input.parts;
  const parts: MessagePart[] = [];
  if (input.text) parts.push({ type: 'text', text: input.text });
  for (const f of input.files ?? []) parts.push({ type: 'file', file_id: f.id, media_type: f.media_type, name: f.name });
  return parts;
}

const storageKey = (chatId: string) => `chatd.chat.${chatId}`;

function defaultStorage(): ChatControllerOptions['storage'] {
  try {
    return typeof sessionStorage === 'undefined' ? null : sessionStorage;
  } catch {
    return null;
  }
}

export class ChatController {
  private snap: ChatSnapshot;
  private readonly listeners = new Set<() => void>();
  readonly stream: ChatStream;
  private readonly storage: ChatControllerOptions['storage'];
  private saveTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(readonly client: ChatdClient, readonly chatId: string, private readonly opts: ChatControllerOptions = {}) {
    this.storage = opts.storage === undefined ? defaultStorage() : opts.storage;
    let cursor = '';
    let state = emptyChatState(chatId);
    try {
      const saved = JSON.parse(this.storage?.getItem(storageKey(chatId)) ?? 'null');
      if (saved?.cursor && saved.state?.chatId === chatId) ({ cursor, state } = saved);
    } catch {
      // a damaged save: start from nothing
    }
    this.snap = { ...state, connection: 'closed', reconnectInMs: 0, lastError: null, busy: isBusy(state.status) };
    this.stream = new ChatStream(client, chatId, {
      ...opts.stream,
      cursor,
      onEvent: (ev) => this.update(applyEvent(this.snap, ev)),
      onReset: () => this.update(emptyChatState(chatId)),
      onState: (connection, delay) => this.set({ connection, reconnectInMs: delay ?? 0 }),
      onFatal: (err) => {
        this.set({ lastError: err });
        if (err.unauthenticated) opts.onUnauthenticated?.(err);
      },
    });
  }

  start(): void {
    this.stream.start();
  }

  stop(): void {
    this.stream.stop();
    this.save();
  }

  subscribe = (fn: () => void): (() => void) => {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  };

  getSnapshot = (): ChatSnapshot => this.snap;

  private update(state: ChatState) {
    if (state === this.snap) return;
    this.set({ ...state, busy: isBusy(state.status) });
    this.scheduleSave();
  }

  private set(patch: Partial<ChatSnapshot>) {
    this.snap = { ...this.snap, ...patch };
    for (const fn of this.listeners) fn();
  }

  private scheduleSave() {
    if (!this.storage || this.saveTimer) return;
    this.saveTimer = setTimeout(() => this.save(), 150);
  }

  /** Writes {cursor, state}: both are consistent between events. */
  save(): void {
    if (this.saveTimer) clearTimeout(this.saveTimer);
    this.saveTimer = null;
    if (!this.storage || !this.stream.cursor) return;
    const { connection: _c, reconnectInMs: _r, lastError: _l, busy: _b, ...state } = this.snap;
    try {
      this.storage.setItem(storageKey(this.chatId), JSON.stringify({ cursor: this.stream.cursor, state }));
    } catch {
      this.storage.removeItem(storageKey(this.chatId)); // over quota: resume from nothing next time
    }
  }

  clearError = (): void => this.set({ lastError: null });

  private async act<T>(fn: () => Promise<T>): Promise<T> {
    try {
      const r = await fn();
      return r;
    } catch (err) {
      const e = err instanceof ChatdError ? err : new ChatdError(0, { message: (err as Error).message });
      this.set({ lastError: e });
      if (e.unauthenticated) this.opts.onUnauthenticated?.(e);
      throw e;
    }
  }

  /** Sends a message; while busy it queues (default) or interrupts. */
  send = (input: SendInput, opts: Omit<SendMessageBody, 'content'> = {}): Promise<SendMessageResponse> =>
    this.act(() => this.client.sendMessage(this.chatId, {
      busy_behavior: this.snap.busy ? 'queue' : undefined, ...opts, content: partsOf(input),
    }));

  interrupt = () => this.act(() => this.client.interrupt(this.chatId));

  /** Replaces a user message's content; what followed it is regenerated. */
  edit = (messageId: string, input: SendInput) =>
    this.act(() => this.client.editMessage(this.chatId, messageId, { content: partsOf(input) }));

  /** Regenerates the last reply: the last user message, re-sent as an edit of itself. */
  regenerate = () => {
    const last = [...this.snap.messages].reverse().find((m) => m.role === 'user');
    if (!last?.id) return Promise.reject(new ChatdError(409, { message: 'there is no message to regenerate a reply to' }));
    return this.edit(last.id, { parts: last.content ?? [{ type: 'text', text: textOf(last.content) }] });
  };

  deleteQueued = (queuedMessageId: string) => this.act(() => this.client.deleteQueuedMessage(this.chatId, queuedMessageId));
  promoteQueued = (queuedMessageId: string) => this.act(() => this.client.promoteQueuedMessage(this.chatId, queuedMessageId));
  submitToolResults = (results: ToolResult[]) => this.act(() => this.client.submitToolResults(this.chatId, results));
  upload = (file: Blob, name = (file as File).name || 'file') => this.act(() => this.client.uploadFile(file, name));
}
