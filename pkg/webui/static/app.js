// app.js: the chat UI's state and wiring. The stream (stream.js) is the only
// source of a chat's messages, queue and status; REST calls (api.js) change
// them and the stream shows the result.
import { Api, ApiError } from './api.js';
import { ChatStream } from './stream.js';
import { actionNodes, chatItemNode, messageNode, previewNodes, queueNodes, textOf } from './render.js';

const TOKEN_KEY = 'chatd.token';
const BUSY = new Set(['running', 'interrupting', 'requires_action']);
const $ = (id) => document.getElementById(id);

let api = null;
let stream = null;
let chats = [];
let chat = null; // the selected chat's state, see freshChat
let editing = null; // the user message being edited
let renderQueued = false;

function freshChat(id) {
  return {
    id, title: '', archived: false, status: '',
    messages: new Map(), // id -> message, committed history
    preview: null, // { hv, ga, seq, parts[] } of the reply being generated
    retired: [0, 0], // episodes at or below this [hv, ga] are over
    queue: [], toolCalls: null, retry: null, error: null, conn: 'connecting', connDelay: 0,
  };
}

// ---- stream events --------------------------------------------------------

const laterThan = (a, b) => a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);

function retirePreview() {
  const p = chat.preview;
  if (p && laterThan([p.hv, p.ga], chat.retired)) chat.retired = [p.hv, p.ga];
  chat.preview = null;
}

function applyEvent(ev) {
  if (!chat || ev.chat_id !== chat.id) return;
  switch (ev.type) {
    case 'message_part': {
      const mp = ev.message_part;
      // 64-bit integers arrive as JSON strings; compare them as numbers.
      const key = [Number(mp.history_version), Number(mp.generation_attempt)];
      if (!laterThan(key, chat.retired)) return; // a finished episode's straggler
      let p = chat.preview;
      if (!p || p.hv !== key[0] || p.ga !== key[1]) {
        retirePreview();
        p = chat.preview = { hv: key[0], ga: key[1], seq: 0, parts: [] };
      }
      const seq = Number(mp.seq);
      if (seq <= p.seq) return; // already shown
      p.seq = seq;
      const { index = 0, ...part } = mp.part || {};
      const cur = p.parts[index];
      if (cur && cur.type === part.type && (part.type === 'text' || part.type === 'reasoning')) {
        cur.text = (cur.text || '') + (part.text || '');
      } else {
        p.parts[index] = part;
      }
      chat.retry = null;
      break;
    }
    case 'preview_reset':
      retirePreview();
      break;
    case 'message':
      // A committed message replaces the preview: never show both.
      retirePreview();
      chat.messages.set(String(ev.message.id), ev.message);
      chat.retry = null;
      break;
    case 'history_reset':
      chat.messages.clear();
      retirePreview();
      break;
    case 'status':
      chat.status = ev.status.status;
      if (chat.status !== 'requires_action') chat.toolCalls = null;
      if (chat.status !== 'running') chat.retry = null;
      if (chat.status !== 'error') chat.error = null;
      updateListStatus(chat.id, chat.status);
      break;
    case 'error':
      chat.error = ev.error;
      break;
    case 'queue_update':
      chat.queue = ev.queue_update.queued_messages || [];
      break;
    case 'action_required':
      chat.toolCalls = ev.action_required.tool_calls || [];
      break;
    case 'retry':
      chat.retry = ev.retry;
      break;
    default:
      return;
  }
  scheduleRender();
}

function openStream(id) {
  stream?.stop();
  stream = new ChatStream({
    chatId: id,
    token: api.token,
    onEvent: applyEvent,
    onRestart: () => { // a stream without a cursor starts from nothing
      if (chat?.id !== id) return;
      const keep = chat;
      chat = freshChat(id);
      Object.assign(chat, { title: keep.title, archived: keep.archived });
      scheduleRender();
    },
    onState: (state, delay) => {
      if (chat?.id !== id) return;
      chat.conn = state;
      chat.connDelay = delay || 0;
      scheduleRender();
    },
    onFatal: (status, message) => {
      if (chat?.id !== id) return;
      if (status === 401) return signOut('Your token was refused: ' + message);
      chat.conn = 'closed';
      chat.error = { message };
      scheduleRender();
    },
  });
  stream.start();
}

// ---- rendering ------------------------------------------------------------

function scheduleRender() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

let shown = new Map(); // message id -> [message, node], for keyed updates

function render() {
  renderList();
  const has = !!chat;
  $('chat-title').textContent = has ? (chat.title || 'Untitled') : 'No chat selected';
  $('chat-status').textContent = has ? chat.status : '';
  $('chat-status').dataset.status = has ? chat.status : '';
  $('chat-status').className = `status ${has ? chat.status : ''}`;
  const conn = !has ? '' : chat.conn === 'waiting' ? `reconnecting in ${Math.ceil(chat.connDelay / 1000)}s` : chat.conn;
  $('conn-state').textContent = conn;
  $('conn-state').dataset.state = has ? chat.conn : '';
  $('archive').hidden = !has;
  $('archive').textContent = has && chat.archived ? 'Unarchive' : 'Archive';

  const box = $('messages');
  // Follow new text when the user is at the bottom, and jump to new messages.
  const stick = box.scrollTop + box.clientHeight >= box.scrollHeight - 40 || (chat?.messages.size ?? 0) !== shown.size;
  renderMessages();
  const preview = $('preview');
  preview.hidden = !chat?.preview;
  preview.replaceChildren(...(chat?.preview ? previewNodes(chat.preview.parts) : []));
  if (stick) box.scrollTop = box.scrollHeight;

  const err = chat?.error;
  $('error-banner').hidden = !err;
  $('error-banner').textContent = err ? `Error${err.kind ? ` (${err.kind})` : ''}: ${err.message || 'unknown error'}` : '';
  renderRetry();

  $('actions').hidden = !chat?.toolCalls?.length;
  if (chat?.toolCalls !== $('actions').shownCalls) { // keep typed answers across renders
    $('actions').shownCalls = chat?.toolCalls;
    $('actions').replaceChildren(...(chat?.toolCalls?.length ? actionNodes(chat.toolCalls, submitToolResults) : []));
  }
  $('queue').hidden = !chat?.queue.length;
  if (chat?.queue !== $('queue').shownQueue) { // re-render only on change, so clicks land
    $('queue').shownQueue = chat?.queue;
    $('queue').replaceChildren(...(chat?.queue.length ? queueNodes(chat.queue, { onDelete: deleteQueued, onPromote: promoteQueued }) : []));
  }

  const busy = has && BUSY.has(chat.status);
  const writable = has ? !chat.archived : true;
  $('composer-input').disabled = !writable;
  $('send').disabled = !writable;
  $('send').textContent = editing ? 'Save edit' : 'Send';
  $('busy-behavior').hidden = !busy || !!editing;
  $('stop').hidden = !has || !(chat.status === 'running' || chat.status === 'requires_action' || chat.status === 'interrupting');
  $('stop').disabled = has && chat.status === 'interrupting';
  $('stop').textContent = has && chat.status === 'interrupting' ? 'Stopping…' : 'Stop';
}

// renderMessages shows the committed messages, keeping the node of every
// message that did not change, then the live preview.
function renderMessages() {
  const box = $('messages');
  const msgs = chat ? [...chat.messages.values()].sort((a, b) => Number(a.id) - Number(b.id)) : [];
  const next = new Map();
  const nodes = msgs.map((m) => {
    const old = shown.get(String(m.id));
    const node = old && old[0] === m && old[2] === chat.archived ? old[1] : messageNode(m, { onEdit: startEdit, editable: !chat.archived });
    next.set(String(m.id), [m, node, chat.archived]);
    return node;
  });
  nodes.push($('preview'));
  if (nodes.length !== box.children.length || nodes.some((n, i) => box.children[i] !== n)) box.replaceChildren(...nodes);
  shown = next;
}

function renderRetry() {
  const r = chat?.retry;
  const banner = $('retry-banner');
  banner.hidden = !r;
  if (!r) return;
  const left = Math.max(0, Date.parse(r.retrying_at) - Date.now());
  banner.dataset.attempt = r.attempt;
  banner.textContent = left > 0
    ? `Attempt ${r.attempt} failed (${r.error}). Retrying in ${Math.ceil(left / 1000)}s…`
    : `Attempt ${r.attempt} failed (${r.error}). Retrying now…`;
}
setInterval(() => { if (chat?.retry) renderRetry(); }, 250);

let shownList = '';

function renderList() {
  const key = JSON.stringify([chat?.id, chats.map((c) => [c.id, c.title, c.status])]);
  if (key === shownList) return; // re-render only on change, so clicks land
  shownList = key;
  $('chat-list').replaceChildren(...chats.map((c) => chatItemNode(c, c.id === chat?.id, selectChat)));
}

function updateListStatus(id, status) {
  const c = chats.find((x) => x.id === id);
  if (c) c.status = status;
}

// ---- actions --------------------------------------------------------------

function flash(err) {
  if (err instanceof ApiError && err.status === 401) return signOut('Your token was refused.');
  console.warn(err);
  if (chat) { chat.error = { message: err.message, kind: 'request' }; scheduleRender(); }
  else alert(err.message);
}

async function act(fn) {
  try { return await fn(); } catch (err) { flash(err); return undefined; }
}

async function loadChats() {
  const res = await act(() => api.listChats($('show-archived').checked));
  if (res) { chats = res.chats || []; scheduleRender(); }
}

async function selectChat(id) {
  editing = null;
  chat = freshChat(id);
  history.replaceState(null, '', `#chat=${encodeURIComponent(id)}`);
  const known = chats.find((c) => c.id === id);
  if (known) Object.assign(chat, { title: known.title, archived: known.archived });
  openStream(id);
  scheduleRender();
  const fresh = await act(() => api.getChat(id));
  if (fresh && chat?.id === id) Object.assign(chat, { title: fresh.title, archived: fresh.archived });
  scheduleRender();
}

async function createChat(form) {
  const req = {};
  const title = form.title.value.trim();
  if (title) req.title = title;
  if (form.system_prompt.value.trim()) req.system_prompt = form.system_prompt.value.trim();
  if (form.dynamic_tools.value.trim()) {
    try { req.dynamic_tools = JSON.parse(form.dynamic_tools.value); } catch (e) { return alert(`Dynamic tools: ${e.message}`); }
  }
  const created = await act(() => api.createChat(req));
  if (!created) return;
  form.reset();
  form.querySelector('details').open = false;
  chats.unshift(created);
  await selectChat(created.id);
}

async function submitComposer() {
  const input = $('composer-input');
  const text = input.value.trim();
  if (!text) return;
  input.value = '';
  let ok;
  if (editing) {
    const m = editing;
    editing = null;
    ok = await act(() => api.edit(chat.id, m.id, text));
  } else if (!chat) {
    const created = await act(() => api.createChat({ content: [{ type: 'text', text }] }));
    ok = created;
    if (created) { chats.unshift(created); await selectChat(created.id); }
  } else {
    const busy = BUSY.has(chat.status) ? $('busy-behavior').value : 'queue';
    ok = await act(() => api.send(chat.id, text, busy));
  }
  if (!ok) input.value = text;
  scheduleRender();
}

function startEdit(m) {
  editing = m;
  $('composer-input').value = textOf(m.content);
  $('composer-input').focus();
  scheduleRender();
}

const submitToolResults = (results) => act(() => api.submitToolResults(chat.id, results));
const deleteQueued = (q) => act(() => api.deleteQueued(chat.id, q.id));
const promoteQueued = (q) => act(() => api.promoteQueued(chat.id, q.id));

// ---- boot -----------------------------------------------------------------

function signOut(message) {
  stream?.stop();
  stream = null;
  chat = null;
  localStorage.removeItem(TOKEN_KEY);
  $('app').hidden = true;
  $('login').hidden = false;
  $('login-error').hidden = !message;
  $('login-error').textContent = message || '';
}

async function signIn(token) {
  api = new Api(token);
  try {
    chats = (await api.listChats(false)).chats || [];
  } catch (err) {
    return signOut(err instanceof ApiError && err.status === 401 ? 'That token was refused.' : err.message);
  }
  localStorage.setItem(TOKEN_KEY, token);
  $('login').hidden = true;
  $('app').hidden = false;
  const want = new URLSearchParams(location.hash.slice(1)).get('chat');
  if (want) await selectChat(want);
  scheduleRender();
}

function boot() {
  const params = new URLSearchParams(location.hash.slice(1));
  const fromURL = params.get('token');
  if (fromURL) {
    // Keep the token out of the address bar and history.
    params.delete('token');
    const rest = params.toString();
    history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  }
  $('login').addEventListener('submit', (e) => { e.preventDefault(); signIn($('token-input').value.trim()); });
  $('new-chat-form').addEventListener('submit', (e) => { e.preventDefault(); createChat(e.target); });
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); submitComposer(); });
  $('composer-input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); submitComposer(); }
    if (e.key === 'Escape' && editing) { editing = null; e.target.value = ''; scheduleRender(); }
  });
  $('stop').addEventListener('click', () => act(() => api.interrupt(chat.id)));
  $('archive').addEventListener('click', async () => {
    const updated = await act(() => api.updateChat(chat.id, { archived: !chat.archived }));
    if (updated) { chat.archived = updated.archived; await loadChats(); }
  });
  $('show-archived').addEventListener('change', loadChats);
  $('sign-out').addEventListener('click', () => signOut());
  setInterval(() => { if (api && !$('app').hidden) loadChats(); }, 15000);

  const token = fromURL || localStorage.getItem(TOKEN_KEY);
  if (token) signIn(token);
  else signOut();
}

// A small hook for tests and debugging.
window.__chatd = {
  dropStream: () => stream?.drop(),
  get cursor() { return stream?.cursor || ''; },
  get connects() { return stream?.connects || 0; },
  get chat() { return chat; },
};

boot();
