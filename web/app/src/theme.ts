// Dark mode: the system's choice unless the user picked one.
const KEY = 'chatd.theme';
export type Theme = 'light' | 'dark' | 'system';

export function loadTheme(): Theme {
  const t = localStorage.getItem(KEY);
  return t === 'light' || t === 'dark' ? t : 'system';
}

export function applyTheme(t: Theme): void {
  const dark = t === 'dark' || (t === 'system' && matchMedia('(prefers-color-scheme: dark)').matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
  if (t === 'system') localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, t);
}
