import { useMemo, useState, type FormEvent, type RefObject } from 'react';
import type { Chat } from '@chatd/client';
import { fullTime, shortTime } from './format';
import type { Theme } from './theme';

interface Props {
  chats: Chat[];
  selected: string;
  onSelect: (id: string) => void;
  onCreate: (opts: { title?: string; system_prompt?: string; dynamic_tools?: unknown }) => Promise<boolean>;
  onRename: (c: Chat, title: string) => Promise<void>;
  showArchived: boolean;
  setShowArchived: (v: boolean) => void;
  error: string;
  searchRef: RefObject<HTMLInputElement | null>;
  theme: Theme;
  setTheme: (t: Theme) => void;
  onSignOut: () => void;
  onClose: () => void;
}

/** Roots first (newest first), each followed by its sub-agent chats. */
export function nest(chats: Chat[]): { chat: Chat; depth: number }[] {
  const ids = new Set(chats.map((c) => c.id));
  const kids = new Map<string, Chat[]>();
  for (const c of chats) {
    if (c.parent_chat_id && ids.has(c.parent_chat_id)) kids.set(c.parent_chat_id, [...(kids.get(c.parent_chat_id) ?? []), c]);
  }
  const out: { chat: Chat; depth: number }[] = [];
  const walk = (c: Chat, depth: number) => {
    out.push({ chat: c, depth });
    for (const k of kids.get(c.id!) ?? []) walk(k, depth + 1);
  };
  for (const c of chats) if (!c.parent_chat_id || !ids.has(c.parent_chat_id)) walk(c, 0);
  return out;
}

export function ChatList(p: Props) {
  const [q, setQ] = useState('');
  const [renaming, setRenaming] = useState('');
  const [title, setTitle] = useState('');
  const [formError, setFormError] = useState('');
  const rows = useMemo(() => {
    const all = nest(p.chats);
    const needle = q.trim().toLowerCase();
    return needle ? all.filter(({ chat }) => (chat.title || 'untitled chat').toLowerCase().includes(needle)) : all;
  }, [p.chats, q]);

  const create = async (e: FormEvent<HTMLFormElement>) => {
    e.preventDefault();
    const f = e.currentTarget;
    const data = new FormData(f);
    const opts: { title?: string; system_prompt?: string; dynamic_tools?: unknown } = {};
    const t = String(data.get('title') ?? '').trim();
    const sp = String(data.get('system_prompt') ?? '').trim();
    const tools = String(data.get('dynamic_tools') ?? '').trim();
    if (t) opts.title = t;
    if (sp) opts.system_prompt = sp;
    if (tools) {
      try {
        opts.dynamic_tools = JSON.parse(tools);
      } catch (err) {
        setFormError(`The tools are not valid JSON: ${(err as Error).message}`);
        return;
      }
    }
    setFormError('');
    if (await p.onCreate(opts)) {
      f.reset();
      f.querySelector('details')?.removeAttribute('open');
    }
  };

  return (
    <nav className="sidebar" aria-label="Chats">
      <div className="brand">
        <span>chatd</span>
        <button type="button" className="icon close" aria-label="Hide chats" onClick={p.onClose}>×</button>
      </div>
      <form className="new-chat" id="new-chat-form" onSubmit={create}>
        <button type="submit" className="primary" data-testid="new-chat">New chat</button>
        <details>
          <summary>Options</summary>
          <label>Title <input name="title" data-testid="new-chat-title" /></label>
          <label>System prompt <textarea name="system_prompt" rows={2} /></label>
          <label>Dynamic tools (JSON) <textarea name="dynamic_tools" rows={3} data-testid="new-chat-tools" placeholder='[{"name":"lookup","description":"…","input_schema":{"type":"object"}}]' /></label>
          {formError && <p className="form-error" role="alert">{formError}</p>}
        </details>
      </form>
      <label className="sr-only" htmlFor="chat-search">Search chats</label>
      <input id="chat-search" ref={p.searchRef} type="search" className="search" data-testid="chat-search" placeholder="Search chats (Ctrl+K)" value={q} onChange={(e) => setQ(e.target.value)} />
      {p.error && <p className="form-error" role="alert">{p.error}</p>}
      <ul className="chat-list" data-testid="chat-list">
        {rows.map(({ chat, depth }) => (
          <li key={chat.id} className={`chat-item${chat.id === p.selected ? ' selected' : ''}${depth ? ' sub' : ''}`} data-testid="chat-item" data-depth={depth}>
            {renaming === chat.id ? (
              <form className="rename" onSubmit={async (e) => { e.preventDefault(); await p.onRename(chat, title.trim()); setRenaming(''); }}>
                <label className="sr-only" htmlFor={`rename-${chat.id}`}>New title</label>
                <input id={`rename-${chat.id}`} data-testid="rename-input" value={title} autoFocus onChange={(e) => setTitle(e.target.value)} onKeyDown={(e) => e.key === 'Escape' && setRenaming('')} />
                <button type="submit" data-testid="rename-save">Save</button>
              </form>
            ) : (
              <>
                <button type="button" className="pick" aria-current={chat.id === p.selected ? 'page' : undefined} onClick={() => p.onSelect(chat.id!)}>
                  <span className="title">{depth > 0 && <span aria-label="sub-agent">↳ </span>}{chat.title || 'Untitled chat'}</span>
                  <time dateTime={chat.updated_at} title={fullTime(chat.updated_at)}>{shortTime(chat.updated_at)}</time>
                  {chat.status && chat.status !== 'waiting' && <span className={`dot ${chat.status}`} aria-label={chat.status} />}
                </button>
                <button type="button" className="icon rename-btn" aria-label={`Rename ${chat.title || 'chat'}`} data-testid="rename-chat" onClick={() => { setRenaming(chat.id!); setTitle(chat.title ?? ''); }}>✎</button>
              </>
            )}
          </li>
        ))}
        {rows.length === 0 && <li className="none">{q ? 'No chat matches.' : 'No chats yet.'}</li>}
      </ul>
      <div className="sidebar-foot">
        <label><input type="checkbox" data-testid="show-archived" checked={p.showArchived} onChange={(e) => p.setShowArchived(e.target.checked)} /> Archived</label>
        <label className="sr-only" htmlFor="theme">Theme</label>
        <select id="theme" data-testid="theme" value={p.theme} onChange={(e) => p.setTheme(e.target.value as Theme)}>
          <option value="system">System theme</option>
          <option value="light">Light</option>
          <option value="dark">Dark</option>
        </select>
        <button type="button" data-testid="sign-out" onClick={p.onSignOut}>Sign out</button>
      </div>
    </nav>
  );
}
