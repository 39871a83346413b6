// render.js: DOM builders. Text from the server is only ever set through
// textContent, never parsed as HTML.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else if (k === 'class') node.className = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined && c !== false) node.append(c);
  }
  return node;
}

const json = (v) => (typeof v === 'string' ? v : JSON.stringify(v ?? null, null, 2));

// partNode renders one message part.
export function partNode(p) {
  switch (p.type) {
    case 'text':
      return el('div', { class: 'part text', 'data-testid': 'part-text', text: p.text ?? '' });
    case 'reasoning':
      return el('details', { class: 'part reasoning', 'data-testid': 'part-reasoning', open: true },
        el('summary', { text: 'Reasoning' }), el('div', { text: p.text ?? '' }));
    case 'tool-call':
      return el('details', { class: 'part tool-call', 'data-testid': 'part-tool-call', 'data-tool-call-id': p.tool_call_id },
        el('summary', { text: `Tool call: ${p.tool_name}` },
          // A lifecycle hook rewrote the input; args is what the tool ran with.
          p.policy_modified ? el('span', { class: 'badge policy-modified', 'data-testid': 'policy-modified', text: ' · Modified by policy' }) : null),
        el('pre', { text: json(p.args) }));
    case 'tool-result':
      return el('details', { class: `part tool-result${p.is_error ? ' is-error' : ''}`, 'data-testid': 'part-tool-result', 'data-tool-call-id': p.tool_call_id },
        el('summary', { text: `${p.is_error ? 'Tool error' : 'Tool result'}: ${p.tool_name}` }), el('pre', { text: json(p.result) }));
    case 'file':
      return el('div', { class: 'part file', text: `File: ${p.name || p.file_id} (${p.media_type || 'unknown type'})` });
    case 'hook-notice':
      // A lifecycle hook's user_message: a notice from policy, not something the user typed.
      return el('div', { class: 'part hook-notice', 'data-testid': 'hook-notice', 'data-hook': p.hook || '' },
        el('span', { class: 'badge', text: 'Policy notice' }), el('span', { text: ` ${p.text ?? ''}` }));
    default:
      return el('pre', { class: 'part unknown', text: json(p) });
  }
}

// messageNode renders a committed message; user messages get an Edit button.
export function messageNode(m, { onEdit, editable }) {
  const notice = m.role === 'system' && (m.content || []).some((p) => p.type === 'hook-notice');
  const head = el('div', { class: 'message-head' }, el('span', { class: 'role', text: notice ? 'policy' : m.role }));
  if (m.role === 'user' && editable) {
    head.append(el('button', { type: 'button', class: 'link', 'data-testid': 'edit-message', text: 'Edit', onclick: () => onEdit(m) }));
  }
  return el('article', { class: `message ${m.role}${notice ? ' notice' : ''}`, 'data-testid': 'message', 'data-role': m.role, 'data-message-id': m.id },
    head, (m.content || []).map(partNode));
}

// previewNodes renders the live parts of the reply being generated.
export function previewNodes(parts) {
  return [el('div', { class: 'message-head' }, el('span', { class: 'role', text: 'assistant (live)' })),
    ...parts.filter(Boolean).map((p) => {
      const n = partNode(p);
      if (p.type === 'text') n.dataset.testid = 'preview-text';
      if (p.type === 'reasoning') n.dataset.testid = 'preview-reasoning';
      return n;
    })];
}

export function textOf(content) {
  return (content || []).filter((p) => p.type === 'text').map((p) => p.text).join('');
}

export function chatItemNode(chat, selected, onSelect) {
  return el('li', { class: selected ? 'selected' : '' },
    el('button', { type: 'button', 'data-testid': 'chat-item', 'data-chat-id': chat.id, 'data-status': chat.status, onclick: () => onSelect(chat.id) },
      el('span', { class: 'title', text: chat.title || 'Untitled' }),
      el('span', { class: `status ${chat.status}`, text: chat.status })));
}

export function queueNodes(queue, { onDelete, onPromote }) {
  return [el('h3', { text: `Queued (${queue.length})` }),
    ...queue.map((q) => el('div', { class: 'queued', 'data-testid': 'queued-message', 'data-queued-id': q.id },
      el('span', { class: 'text', text: textOf(q.content) }),
      el('button', { type: 'button', 'data-testid': 'queue-promote', text: 'Send now', onclick: () => onPromote(q) }),
      el('button', { type: 'button', class: 'danger', 'data-testid': 'queue-delete', text: 'Delete', onclick: () => onDelete(q) })))];
}

// actionNodes renders a form answering pending dynamic tool calls.
export function actionNodes(calls, onSubmit) {
  const rows = calls.map((c) => {
    const output = el('textarea', { rows: 2, 'data-testid': 'tool-output', placeholder: 'Output (JSON or text)' });
    const isError = el('input', { type: 'checkbox', 'data-testid': 'tool-is-error' });
    return { c, output, isError, node: el('div', { class: 'tool-call', 'data-testid': 'tool-call', 'data-tool-call-id': c.tool_call_id },
      el('div', { text: `The model called ${c.tool_name}:` }), el('pre', { text: json(c.args) }),
      output, el('label', {}, isError, ' is an error')) };
  });
  const submit = () => onSubmit(rows.map(({ c, output, isError }) => {
    let out = output.value;
    try { out = JSON.parse(out); } catch { /* plain text */ }
    return { tool_call_id: c.tool_call_id, output: out, is_error: isError.checked };
  }));
  return [el('h3', { text: 'The chat needs tool results' }), ...rows.map((r) => r.node),
    el('button', { type: 'button', 'data-testid': 'submit-tool-results', text: 'Submit results', onclick: submit })];
}
