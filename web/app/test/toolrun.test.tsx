// @vitest-environment jsdom
import { act, cleanup, render, screen } from '@testing-library/react';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ChatdClient } from '@chatd/client';
import { Part, ToolRun } from '../src/Parts';
import { elapsed } from '../src/format';

const client = new ChatdClient({ baseUrl: 'http://127.0.0.1:1', token: 't' });

describe('running tool calls', () => {
  beforeEach(() => {
    vi.useFakeTimers();
    vi.setSystemTime(new Date('2026-03-10T12:00:07Z'));
  });
  afterEach(() => {
    cleanup();
    vi.useRealTimers();
  });

  it('count a running call\'s time up every second, with its progress', () => {
    render(<ToolRun part={{ type: 'tool-status', tool_call_id: 'c1', tool_name: 'ops__sync', state: 'running', started_at: '2026-03-10T12:00:00Z', progress: 1, total: 2, message: 'half way' }} />);
    const run = screen.getByTestId('tool-run');
    expect(run.dataset.state).toBe('running');
    expect(run.textContent).toContain('ops__sync');
    expect(screen.getByTestId('tool-elapsed').textContent).toBe('7s');
    expect(screen.getByTestId('tool-progress').textContent).toContain('1/2 half way');
    act(() => { vi.advanceTimersByTime(3000); });
    expect(screen.getByTestId('tool-elapsed').textContent).toBe('10s');
  });

  it('say how a finished call ended and after how long', () => {
    render(<Part client={client} live part={{ type: 'tool-status', tool_call_id: 'c1', tool_name: 'ops__sync', state: 'failed', started_at: '2026-03-10T12:00:00Z', duration_ms: 1500 }} />);
    const run = screen.getByTestId('tool-run');
    expect(run.dataset.state).toBe('failed');
    expect(run.textContent).toContain('after 1s');
    expect(screen.queryByTestId('tool-elapsed')).toBeNull();
  });

  it('show a stored call REST reports running with its elapsed time', () => {
    render(<Part client={client} part={{ type: 'tool-call', tool_call_id: 'c1', tool_name: 'ops__sync', args: {}, state: 'running', started_at: '2026-03-10T11:58:00Z' }} />);
    expect(screen.getByTestId('tool-call-state').dataset.state).toBe('running');
    expect(screen.getByTestId('tool-elapsed').textContent).toBe('2m 07s');
  });
});

describe('elapsed', () => {
  it('reads as a person would say it', () => {
    expect(elapsed(400)).toBe('0.4s');
    expect(elapsed(7250)).toBe('7s');
    expect(elapsed(125000)).toBe('2m 05s');
    expect(elapsed(3720000)).toBe('1h 02m');
  });
});
