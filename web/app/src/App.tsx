import { useCallback, useEffect, useMemo, useRef, useState, type FormEvent } from 'react';
import { ChatdClient, ChatdError, type Chat, type ModelConfig } from '@chatd/client';
import { ChatdProvider } from '@chatd/react';
import { ChatView } from './ChatView';
import { ChatList } from './ChatList';
import { chatFromURL, refusedMessage, setChatInURL, storeToken, storedToken, takeTokenFromURL, tokenFromInput } from './auth';
import { applyTheme, loadTheme, type Theme } from './theme';

export function App() {
  const [token, setToken] = useState(() => takeTokenFromURL() || storedToken());
  const [signInError, setSignInError] = useState('');
  const [signedIn, setSignedIn] = useState(false);
  const [theme, setTheme] = useState<Theme>(loadTheme);
  useEffect(() => applyTheme(theme), [theme]);

  // A dev URL pasted into an open tab only changes the fragment: pick it up.
  useEffect(() => {
    const onHash = () => {
      const t = takeTokenFromURL();
      if (t) {
        setSignedIn(false);
        setToken(t);
      }
    };
    addEventListener('hashchange', onHash);
    return () => removeEventListener('hashchange', onHash);
  }, []);

  const client = useMemo(() => (token ? new ChatdClient({ token }) : null), [token]);

  // Check the token before showing the app: a refused one explains itself.
  useEffect(() => {
    if (!client) return;
    let live = true;
    client.listChats({ page_size: 1 }).then(
      () => {
        if (!live) return;
        storeToken(client.token);
        setSignInError('');
        setSignedIn(true);
      },
      (err: ChatdError) => {
        if (!live) return;
        setSignedIn(false);
        setToken('');
        storeToken(null);
        setSignInError(err.unauthenticated ? refusedMessage(err.message) : `Could not reach chatd: ${err.message}`);
      },
    );
    return () => { live = false; };
  }, [client]);

  const signOut = useCallback((message = '') => {
    storeToken(null);
    setSignedIn(false);
    setToken('');
    setSignInError(message);
  }, []);

  if (!client || !signedIn) {
    return <SignIn error={signInError} checking={!!client && !signInError} onToken={(t) => { setSignInError(''); setToken(t); }} />;
  }
  return (
    <ChatdProvider client={client}>
      <Shell client={client} theme={theme} setTheme={setTheme} onSignOut={signOut} />
    </ChatdProvider>
  );
}

function SignIn({ error, checking, onToken }: { error: string; checking: boolean; onToken: (t: string) => void }) {
  const [value, setValue] = useState('');
  const submit = (e: FormEvent) => {
    e.preventDefault();
    const t = tokenFromInput(value);
    if (t) onToken(t);
  };
  return (
    <main className="signin">
      <form onSubmit={submit} data-testid="login" aria-labelledby="signin-title">
        <h1 id="signin-title">Sign in to chatd</h1>
        <p>Paste your bearer token, or the whole URL <code>chatd dev</code> printed.</p>
        <label htmlFor="token-input">Token or dev URL</label>
        <input id="token-input" data-testid="token-input" autoComplete="off" spellCheck={false} value={value} onChange={(e) => setValue(e.target.value)} autoFocus />
        <button type="submit" className="primary" data-testid="sign-in" disabled={checking}>{checking ? 'Checking…' : 'Sign in'}</button>
        <p className="login-error" id="login-error" data-testid="login-error" role="alert" hidden={!error}>{error}</p>
      </form>
    </main>
  );
}

function Shell({ client, theme, setTheme, onSignOut }: { client: ChatdClient; theme: Theme; setTheme: (t: Theme) => void; onSignOut: (m?: string) => void }) {
  const [chats, setChats] = useState<Chat[]>([]);
  const [showArchived, setShowArchived] = useState(false);
  const [selected, setSelected] = useState(chatFromURL);
  const [selectedChat, setSelectedChat] = useState<Chat | null>(null);
  const [models, setModels] = useState<ModelConfig[]>([]);
  const [drawer, setDrawer] = useState(false);
  const [listError, setListError] = useState('');
  const searchRef = useRef<HTMLInputElement>(null);

  const refused = useCallback((err: unknown) => {
    if (err instanceof ChatdError && err.unauthenticated) onSignOut(refusedMessage(err.message));
  }, [onSignOut]);

  const load = useCallback(async () => {
    try {
      setChats(await client.listAllChats({ archived: showArchived }));
      setListError('');
    } catch (err) {
      refused(err);
      setListError((err as Error).message);
    }
  }, [client, showArchived, refused]);

  useEffect(() => {
    void load();
    const t = setInterval(load, 15000);
    return () => clearInterval(t);
  }, [load]);

  useEffect(() => {
    client.listModels().then((r) => setModels((r.model_configs ?? []).filter((m) => m.enabled !== false)), () => setModels([]));
  }, [client]);

  // The selected chat: from the list, else fetched (e.g. an archived one from the URL).
  useEffect(() => {
    setChatInURL(selected || null);
    if (!selected) { setSelectedChat(null); return; }
    const known = chats.find((c) => c.id === selected);
    if (known) { setSelectedChat(known); return; }
    client.getChat(selected).then((r) => setSelectedChat(r), (err) => { refused(err); setSelected(''); });
  }, [client, selected, chats, refused]);

  const select = (id: string) => { setSelected(id); setDrawer(false); };

  const create = async (opts: { title?: string; system_prompt?: string; dynamic_tools?: unknown; model_config_id?: string }) => {
    try {
      const r = await client.createChat(opts as never);
      setChats((cs) => [r, ...cs]);
      select(r.id!);
      return true;
    } catch (err) {
      refused(err);
      alert((err as Error).message);
      return false;
    }
  };

  // Keyboard shortcuts: Ctrl/Cmd+K search, Ctrl/Cmd+Shift+O new chat, / focus the composer.
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      const mod = e.ctrlKey || e.metaKey;
      if (mod && e.key.toLowerCase() === 'k') { e.preventDefault(); setDrawer(true); searchRef.current?.focus(); }
      if (mod && e.shiftKey && e.key.toLowerCase() === 'o') { e.preventDefault(); void create({}); }
      const t = e.target as HTMLElement;
      if (e.key === '/' && !mod && !/INPUT|TEXTAREA|SELECT/.test(t.tagName)) { e.preventDefault(); document.getElementById('composer-input')?.focus(); }
    };
    addEventListener('keydown', onKey);
    return () => removeEventListener('keydown', onKey);
  });

  return (
    <div className={`app${drawer ? ' drawer-open' : ''}`} data-testid="app">
      <ChatList chats={chats} selected={selected} onSelect={select} onCreate={create} onRename={async (c, title) => {
        try { await client.updateChat(c.id!, { title }); await load(); } catch (err) { refused(err); alert((err as Error).message); }
      }} showArchived={showArchived} setShowArchived={setShowArchived} error={listError} searchRef={searchRef}
        theme={theme} setTheme={setTheme} onSignOut={() => onSignOut()} onClose={() => setDrawer(false)} />
      <div className="scrim" onClick={() => setDrawer(false)} hidden={!drawer} />
      {selectedChat ? (
        <ChatView key={selectedChat.id} client={client} chat={selectedChat} models={models} onChanged={load}
          onArchived={async () => { await load(); if (!showArchived) setSelected(''); }}
          onUnauthenticated={(m) => onSignOut(refusedMessage(m))} onMenu={() => setDrawer(true)} />
      ) : (
        <main id="chat" className="chat nochat">
          <header className="chat-header">
            <button type="button" className="icon menu" aria-label="Show chats" onClick={() => setDrawer(true)}>☰</button>
            <h1 data-testid="chat-title">No chat selected</h1>
          </header>
          <div className="empty-state">
            <p>Pick a chat, or start a new one.</p>
            <button type="button" className="primary" onClick={() => void create({})}>New chat</button>
          </div>
        </main>
      )}
    </div>
  );
}
