// api.js: the REST facade (/api/v2) with a bearer token.

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `HTTP ${status}`);
    this.status = status;
    this.reason = body?.reason || '';
  }
}

const enc = encodeURIComponent;

// requestID is a fresh idempotency key (crypto.randomUUID needs a secure
// context; plain http on a LAN address is not one).
function requestID() {
  if (crypto.randomUUID) return crypto.randomUUID();
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

export class Api {
  constructor(token) {
    this.token = token;
  }

  async req(method, path, body) {
    const headers = { Authorization: `Bearer ${this.token}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await resp.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
    if (!resp.ok) throw new ApiError(resp.status, data);
    return data;
  }

  listChats(archived) { return this.req('GET', `/api/v2/chats?archived=${archived}&page_size=200`); }
  createChat(req) { return this.req('POST', '/api/v2/chats', req); }
  getChat(id) { return this.req('GET', `/api/v2/chats/${enc(id)}`); }
  updateChat(id, patch) { return this.req('PATCH', `/api/v2/chats/${enc(id)}`, patch); }
  listMessages(id) { return this.req('GET', `/api/v2/chats/${enc(id)}/messages`); }
  send(id, text, busyBehavior) {
    return this.req('POST', `/api/v2/chats/${enc(id)}/messages`, {
      content: [{ type: 'text', text }],
      busy_behavior: busyBehavior,
      request_id: requestID(),
    });
  }
  edit(id, messageId, text) {
    return this.req('PATCH', `/api/v2/chats/${enc(id)}/messages/${enc(messageId)}`, { content: [{ type: 'text', text }] });
  }
  deleteQueued(id, qid) { return this.req('DELETE', `/api/v2/chats/${enc(id)}/queue/${enc(qid)}`); }
  promoteQueued(id, qid) { return this.req('POST', `/api/v2/chats/${enc(id)}/queue/${enc(qid)}/promote`); }
  interrupt(id) { return this.req('POST', `/api/v2/chats/${enc(id)}/interrupt`); }
  submitToolResults(id, results) { return this.req('POST', `/api/v2/chats/${enc(id)}/tool-results`, { results }); }
}
