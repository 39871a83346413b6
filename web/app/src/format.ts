/** A short, human time: "14:05" today, "Mon 14:05" this week, else "3 Mar" or "3 Mar 2024". */
export function shortTime(iso: string | undefined, now = new Date()): string {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const hm = d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit' });
  const days = (now.getTime() - d.getTime()) / 86400000;
  if (d.toDateString() === now.toDateString()) return hm;
  if (days < 6) return `${d.toLocaleDateString(undefined, { weekday: 'short' })} ${hm}`;
  return d.toLocaleDateString(undefined, d.getFullYear() === now.getFullYear() ? { day: 'numeric', month: 'short' } : { day: 'numeric', month: 'short', year: 'numeric' });
}

export function fullTime(iso: string | undefined): string {
  return iso ? new Date(iso).toLocaleString() : '';
}

export function pretty(v: unknown): string {
  if (typeof v === 'string') {
    try {
      return JSON.stringify(JSON.parse(v), null, 2);
    } catch {
      return v;
    }
  }
  return JSON.stringify(v, null, 2) ?? '';
}

export const statusLabel: Record<string, string> = {
  waiting: 'Ready', running: 'Replying…', interrupting: 'Stopping…', requires_action: 'Waiting for tool results', error: 'Error',
};

/** A duration as a person reads it: "0.4s", "7s", "2m 05s", "1h 02m". */
export function elapsed(ms: number): string {
  if (ms < 1000) return `${(Math.max(0, ms) / 1000).toFixed(1)}s`;
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const pad = (n: number) => String(n).padStart(2, '0');
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
}
