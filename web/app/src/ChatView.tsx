import { useCallback, useEffect, useRef, useState, type ClipboardEvent, type DragEvent, type FormEvent, type KeyboardEvent } from 'react';
import { textOf, type Chat, type ChatdClient, type Message, type ModelConfig, type ToolCall, type UploadedFile } from '@chatd/client';
import { useChat } from '@chatd/react';
import { Part } from './Parts';
import { CopyButton } from './Markdown';
import { fullTime, pretty, shortTime, statusLabel } from './format';

interface Props {
  client: ChatdClient;
  chat: Chat;
  models: ModelConfig[];
  onChanged: () => void;
  onArchived: () => void;
  onUnauthenticated: (message: string) => void;
  onMenu: () => void;
}

interface Pending { file: File; preview: string; uploaded?: UploadedFile; error?: string }

export function ChatView({ client, chat, models, onChanged, onArchived, onUnauthenticated, onMenu }: Props) {
  const c = useChat(chat.id!, { client, onUnauthenticated: (e) => onUnauthenticated(e.message) });
  const [text, setText] = useState('');
  const [editing, setEditing] = useState<Message | null>(null);
  const [busyBehavior, setBusyBehavior] = useState<'queue' | 'interrupt'>('queue');
  const [files, setFiles] = useState<Pending[]>([]);
  const [model, setModel] = useState('');
  const [confirmArchive, setConfirmArchive] = useState(false);
  const [announce, setAnnounce] = useState('');
  const [dragging, setDragging] = useState(false);
  const input = useRef<HTMLTextAreaElement>(null);
  const box = useRef<HTMLDivElement>(null);
  const fileInput = useRef<HTMLInputElement>(null);

  // Tell screen readers when a reply starts and when it is done (not every token).
  const lastCount = useRef(c.messages.length);
  useEffect(() => {
    if (c.messages.length > lastCount.current) {
      const m = c.messages[c.messages.length - 1];
      if (m.role === 'assistant') setAnnounce(`Reply: ${textOf(m.content).slice(0, 200)}`);
    }
    lastCount.current = c.messages.length;
  }, [c.messages]);
  useEffect(() => {
    if (c.status === 'running') setAnnounce('The assistant is replying…');
    if (c.status === 'error' && c.error) setAnnounce(`Error: ${c.error.message}`);
    if (c.status === 'waiting' || c.status === 'error') onChanged(); // titles can change after a turn
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [c.status]);

  // Follow the reply while the user is at the bottom.
  const atBottom = useRef(true);
  const onScroll = () => {
    const el = box.current!;
    atBottom.current = el.scrollTop + el.clientHeight >= el.scrollHeight - 60;
  };
  useEffect(() => {
    if (atBottom.current && box.current) box.current.scrollTop = box.current.scrollHeight;
  });

  const addFiles = useCallback(async (list: File[]) => {
    for (const file of list) {
      const p: Pending = { file, preview: file.type.startsWith('image/') ? URL.createObjectURL(file) : '' };
      setFiles((fs) => [...fs, p]);
      try {
        const uploaded = await c.upload(file, file.name || `pasted-${Date.now()}.${file.type.split('/')[1] || 'bin'}`);
        setFiles((fs) => fs.map((x) => (x.file === file ? { ...x, uploaded } : x)));
      } catch (err) {
        setFiles((fs) => fs.map((x) => (x.file === file ? { ...x, error: (err as Error).message } : x)));
      }
    }
  }, [c]);

  const uploading = files.some((f) => !f.uploaded && !f.error);
  const submit = async (e?: FormEvent) => {
    e?.preventDefault();
    const t = text.trim();
    const ready = files.filter((f) => f.uploaded).map((f) => f.uploaded!);
    if ((!t && !ready.length) || uploading) return;
    try {
      if (editing) {
        await c.edit(editing.id!, { text: t, files: ready });
        setEditing(null);
      } else {
        await c.send({ text: t, files: ready }, {
          busy_behavior: c.busy ? busyBehavior : undefined,
          model_config_id: model || undefined,
        });
      }
      setText('');
      files.forEach((f) => f.preview && URL.revokeObjectURL(f.preview));
      setFiles([]);
    } catch {
      // lastError shows it; the text stays in the box
    }
    input.current?.focus();
  };

  const onKey = (e: KeyboardEvent<HTMLTextAreaElement>) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
      e.preventDefault();
      void submit();
    }
    if (e.key === 'Escape') {
      if (editing) {
        setEditing(null);
        setText('');
      } else if (c.busy) void c.interrupt().catch(() => {});
    }
  };

  const onPaste = (e: ClipboardEvent) => {
    const list = [...e.clipboardData.files];
    if (list.length) {
      e.preventDefault();
      void addFiles(list);
    }
  };
  const onDrop = (e: DragEvent) => {
    e.preventDefault();
    setDragging(false);
    if (e.dataTransfer.files.length) void addFiles([...e.dataTransfer.files]);
  };

  const startEdit = (m: Message) => {
    setEditing(m);
    setText(textOf(m.content));
    input.current?.focus();
  };

  const archive = async () => {
    setConfirmArchive(false);
    try {
      await client.updateChat(chat.id!, { archived: !chat.archived });
      onArchived();
    } catch (err) {
      alert((err as Error).message);
    }
  };

  const lastAssistant = [...c.messages].reverse().find((m) => m.role === 'assistant');
  const writable = !chat.archived;
  const conn = c.connection === 'waiting' ? `reconnecting in ${Math.ceil(c.reconnectInMs / 1000)}s` : c.connection === 'live' ? 'live' : c.connection;

  // Expose the stream for tests and debugging.
  useEffect(() => {
    const w = window as unknown as { __chatd?: object };
    w.__chatd = {
      dropStream: () => c.controller?.stream.drop(),
      get cursor() { return c.controller?.stream.cursor ?? ''; },
      get connects() { return c.controller?.stream.connects ?? 0; },
      get chat() { return c.controller?.getSnapshot(); },
    };
  }, [c.controller]);

  return (
    <main id="chat" className={`chat${dragging ? ' dragging' : ''}`} aria-label="Chat" onDragOver={(e) => { e.preventDefault(); setDragging(true); }} onDragLeave={() => setDragging(false)} onDrop={onDrop}>
      <header className="chat-header">
        <button type="button" className="icon menu" aria-label="Show chats" onClick={onMenu}>☰</button>
        <h1 data-testid="chat-title" title={chat.title}>{chat.title || 'Untitled chat'}</h1>
        <span className={`status ${c.status}`} data-testid="chat-status" data-status={c.status} title={statusLabel[c.status] ?? ''}>{c.status}</span>
        <span className={`conn ${c.connection}`} data-testid="conn-state" data-state={c.connection}>{conn}</span>
        <button type="button" data-testid="archive-chat" onClick={() => (chat.archived ? archive() : setConfirmArchive(true))}>{chat.archived ? 'Unarchive' : 'Archive'}</button>
      </header>
      {confirmArchive && (
        <div className="confirm" role="alertdialog" aria-labelledby="confirm-text" data-testid="archive-confirm">
          <span id="confirm-text">Archive “{chat.title || 'Untitled chat'}” and its sub-agent chats?</span>
          <button type="button" className="danger" data-testid="confirm-archive" autoFocus onClick={archive}>Archive</button>
          <button type="button" onClick={() => setConfirmArchive(false)}>Cancel</button>
        </div>
      )}

      <div className="messages" data-testid="messages" ref={box} onScroll={onScroll} aria-busy={c.busy}>
        {c.messages.length === 0 && !c.live && c.status === 'waiting' && <p className="empty">Say hello. Markdown works; drop or paste images to attach them.</p>}
        {c.messages.map((m) => (
          <article key={m.id} className={`message ${m.role}`} data-testid="message" data-role={m.role} data-id={m.id}>
            <div className="meta">
              <span className="who">{m.role === 'user' ? 'You' : m.role === 'assistant' ? 'Assistant' : m.role}</span>
              <time dateTime={m.created_at} title={fullTime(m.created_at)}>{shortTime(m.created_at)}</time>
            </div>
            {(m.content ?? []).map((p, i) => <Part key={i} part={p} client={client} />)}
            <div className="actions">
              {m.role === 'user' && writable && <button type="button" data-testid="edit-message" onClick={() => startEdit(m)}>Edit</button>}
              {m.role === 'assistant' && <CopyButton text={textOf(m.content)} label="Copy reply" />}
              {m === lastAssistant && writable && !c.busy && <button type="button" data-testid="regenerate" onClick={() => c.regenerate().catch(() => {})}>Regenerate</button>}
            </div>
          </article>
        ))}
        <article className="message assistant live" data-testid="preview" hidden={!c.live} aria-hidden="true">
          <div className="meta"><span className="who">{c.live?.role === 'tool' ? 'Running tools' : 'Assistant'}</span></div>
          {c.live?.parts.map((p, i) => p && <Part key={i} part={p} client={client} live />)}
          <span className="cursor" data-testid="stream-cursor" />
        </article>
      </div>

      <div className="sr-only" aria-live="polite" data-testid="live-region">{announce}</div>

      <div className="banner retry" data-testid="retry-banner" role="status" hidden={!c.retry} data-attempt={c.retry?.attempt}>
        {c.retry && (c.retryInMs > 0
          ? `Attempt ${c.retry.attempt} failed (${c.retry.error}). Retrying in ${Math.ceil(c.retryInMs / 1000)}s…`
          : `Attempt ${c.retry.attempt} failed (${c.retry.error}). Retrying now…`)}
      </div>
      <div className="banner error" data-testid="error-banner" role="alert" hidden={!c.error && !c.lastError}>
        {c.error && <span>Error{c.error.kind ? ` (${c.error.kind})` : ''}: {c.error.message}. Send a message to try again.</span>}
        {!c.error && c.lastError && <span>{c.lastError.message}{c.lastError.reason ? ` (${c.lastError.reason})` : ''}</span>}
        {!c.error && c.lastError && <button type="button" className="icon" aria-label="Dismiss" onClick={c.clearError}>×</button>}
      </div>

      <ToolForm calls={c.toolCalls} hidden={c.status !== 'requires_action' || !c.toolCalls.length} onSubmit={(r) => c.submitToolResults(r).then(() => {}, () => {})} />

      <section className="queue" data-testid="queue" hidden={!c.queue.length} aria-label="Queued messages">
        <h2>Queued</h2>
        {c.queue.map((q) => (
          <div key={q.id} className="queued" data-testid="queued-message">
            <span className="qtext">{textOf(q.content) || '(attachment)'}</span>
            <button type="button" data-testid="queue-promote" onClick={() => c.promoteQueued(q.id!).catch(() => {})}>Send now</button>
            <button type="button" data-testid="queue-delete" aria-label="Delete queued message" onClick={() => c.deleteQueued(q.id!).catch(() => {})}>Delete</button>
          </div>
        ))}
      </section>

      <form className="composer" data-testid="composer" onSubmit={submit}>
        {editing && <div className="editing">Editing your message — what followed it will be replaced. <button type="button" onClick={() => { setEditing(null); setText(''); }}>Cancel</button></div>}
        {files.length > 0 && (
          <ul className="pending" aria-label="Attachments">
            {files.map((f, i) => (
              <li key={i} data-testid="pending-file" data-state={f.error ? 'failed' : f.uploaded ? 'uploaded' : 'uploading'}>
                {f.preview ? <img src={f.preview} alt="" /> : <span className="badge">file</span>}
                <span>{f.file.name || 'pasted image'}{f.error ? ` — ${f.error}` : f.uploaded ? '' : ' — uploading…'}</span>
                <button type="button" className="icon" aria-label={`Remove ${f.file.name}`} onClick={() => setFiles((fs) => fs.filter((x) => x !== f))}>×</button>
              </li>
            ))}
          </ul>
        )}
        <label htmlFor="composer-input" className="sr-only">Message</label>
        <textarea id="composer-input" ref={input} data-testid="composer-input" rows={2} value={text} disabled={!writable}
          placeholder={writable ? 'Message (Enter to send, Shift+Enter for a new line)' : 'This chat is archived'}
          onChange={(e) => setText(e.target.value)} onKeyDown={onKey} onPaste={onPaste} />
        <div className="row">
          <input ref={fileInput} type="file" multiple hidden data-testid="file-input" onChange={(e) => { void addFiles([...(e.target.files ?? [])]); e.target.value = ''; }} />
          <button type="button" aria-label="Attach files" data-testid="attach-button" disabled={!writable} onClick={() => fileInput.current?.click()}>Attach</button>
          {models.length > 1 && (
            <select aria-label="Model" data-testid="model-picker" value={model} onChange={(e) => setModel(e.target.value)}>
              <option value="">Default model</option>
              {models.map((m) => <option key={m.id} value={m.id}>{m.display_name || m.model}</option>)}
            </select>
          )}
          <select aria-label="While a reply is running" data-testid="busy-behavior" hidden={!c.busy || !!editing} value={busyBehavior} onChange={(e) => setBusyBehavior(e.target.value as 'queue' | 'interrupt')}>
            <option value="queue">Queue</option>
            <option value="interrupt">Interrupt</option>
          </select>
          <span className="spacer" />
          <button type="button" className="stop" data-testid="stop-button" hidden={!c.busy} disabled={c.status === 'interrupting'} onClick={() => c.interrupt().catch(() => {})}>
            {c.status === 'interrupting' ? 'Stopping…' : 'Stop'}
          </button>
          <button type="submit" className="primary" data-testid="send-button" disabled={!writable || uploading}>{editing ? 'Save edit' : 'Send'}</button>
        </div>
      </form>
    </main>
  );
}

function ToolForm({ calls, hidden, onSubmit }: { calls: ToolCall[]; hidden: boolean; onSubmit: (r: { tool_call_id: string; output: never; is_error?: boolean }[]) => void }) {
  const [outputs, setOutputs] = useState<Record<string, string>>({});
  return (
    <section className="action" data-testid="action-required" hidden={hidden} aria-label="Tool calls waiting for results">
      <h2>The model called your tools</h2>
      {calls.map((tc) => (
        <div key={tc.tool_call_id} className="toolcall" data-testid="tool-call">
          <div><code>{tc.tool_name}</code></div>
          <pre>{pretty(tc.args)}</pre>
          <label>Result (JSON or text)
            <textarea data-testid="tool-output" rows={2} value={outputs[tc.tool_call_id] ?? ''} onChange={(e) => setOutputs({ ...outputs, [tc.tool_call_id]: e.target.value })} />
          </label>
        </div>
      ))}
      <button type="button" className="primary" data-testid="submit-tool-results" onClick={() => onSubmit(calls.map((tc) => {
        const raw = outputs[tc.tool_call_id] ?? '';
        let output: unknown = raw;
        try { output = JSON.parse(raw); } catch { /* plain text */ }
        return { tool_call_id: tc.tool_call_id, output: output as never };
      }))}>Send results</button>
    </section>
  );
}
