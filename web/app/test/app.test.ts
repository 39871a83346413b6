import { describe, expect, it } from 'vitest';
import { tokenFromInput, refusedMessage } from '../src/auth';
import { nest } from '../src/ChatList';
import { pretty, shortTime } from '../src/format';

describe('sign-in input', () => {
  it('takes a bare token or the token out of a pasted dev URL', () => {
    expect(tokenFromInput('  abc.def.ghi \n')).toBe('abc.def.ghi');
    expect(tokenFromInput('http://127.0.0.1:8080/#token=abc.def.ghi')).toBe('abc.def.ghi');
    expect(tokenFromInput('http://h/#chat=1&token=a%2Eb')).toBe('a.b');
  });
  it('explains a refused token and what to do', () => {
    const m = refusedMessage('token is expired');
    expect(m).toContain('token is expired');
    expect(m).toContain('chatd token');
  });
});

describe('the chat list', () => {
  it('nests sub-agent chats under their parent, keeping the list order, and keeps orphans at the top level', () => {
    const rows = nest([
      { id: 'b', title: 'B' }, { id: 'a', title: 'A' }, { id: 'a1', parent_chat_id: 'a' }, { id: 'a1x', parent_chat_id: 'a1' },
      { id: 'o', parent_chat_id: 'gone' },
    ]);
    expect(rows.map((r) => [r.chat.id, r.depth])).toEqual([['b', 0], ['a', 0], ['a1', 1], ['a1x', 2], ['o', 0]]);
  });
});

describe('formatting', () => {
  it('shows today as a time and older days as a date', () => {
    const now = new Date('2026-03-10T12:00:00');
    expect(shortTime('2026-03-10T09:05:00', now)).toMatch(/09.05|9.05/);
    expect(shortTime('2025-01-02T09:05:00', now)).toContain('2025');
    expect(shortTime(undefined, now)).toBe('');
  });
  it('pretty-prints JSON arguments, strings holding JSON included', () => {
    expect(pretty('{"a":1}')).toBe('{\n  "a": 1\n}');
    expect(pretty({ b: [1] })).toBe('{\n  "b": [\n    1\n  ]\n}');
    expect(pretty('plain')).toBe('plain');
  });
});
