// The bearer token: from a pasted dev URL (#token=...), which is moved to
// localStorage and removed from the address bar, or from localStorage.
export const TOKEN_KEY = 'chatd.token';

/** Takes #token= out of the address bar and returns it ("" when absent). */
export function takeTokenFromURL(): string {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get('token')?.trim() ?? '';
  if (!token) return '';
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', location.pathname + location.search + (rest ? `#${rest}` : ''));
  return token;
}

/** A token typed or pasted into the sign-in box: a bare token or a whole dev URL. */
export function tokenFromInput(text: string): string {
  const t = text.trim();
  const m = /[#&]token=([^&\s]+)/.exec(t);
  return m ? decodeURIComponent(m[1]) : t;
}

export function storedToken(): string {
  try {
    return localStorage.getItem(TOKEN_KEY) ?? '';
  } catch {
    return '';
  }
}

export function storeToken(token: string | null): void {
  if (token) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
}

/** A sentence for a refused token that says what to do. */
export function refusedMessage(serverMessage: string): string {
  return `That token was refused (${serverMessage || 'no reason given'}). Tokens expire and are tied to the server's signing secret: ` +
    'print a fresh one with `chatd token` or use the URL `chatd dev` prints, then paste it here.';
}

/** The hash route: #chat=<id>. */
export function chatFromURL(): string {
  return new URLSearchParams(location.hash.slice(1)).get('chat') ?? '';
}

export function setChatInURL(id: string | null): void {
  history.replaceState(null, '', location.pathname + location.search + (id ? `#chat=${encodeURIComponent(id)}` : ''));
}
