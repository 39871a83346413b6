/**
 * ChatdError is every refused or failed request: the HTTP status and the
 * error body chatd sends ({message, code, reason, detail?}, pkg/httperror).
 * code is the snake_case gRPC name (not_found, failed_precondition, ...),
 * reason an UPPER_SNAKE word ("" when the server gave none).
 */
export class ChatdError extends Error {
  readonly status: number;
  readonly code: string;
  readonly reason: string;
  readonly detail?: unknown;

  constructor(status: number, body: { message?: string; code?: string; reason?: string; detail?: unknown } | null) {
    super(body?.message || (status ? `HTTP ${status}` : 'network error'));
    this.name = 'ChatdError';
    this.status = status;
    this.code = body?.code || codeOf(status);
    this.reason = body?.reason || '';
    this.detail = body?.detail;
  }

  /** The token is missing, malformed, expired or signed with another key. */
  get unauthenticated(): boolean {
    return this.status === 401;
  }
}

function codeOf(status: number): string {
  switch (status) {
    case 0: return 'unavailable';
    case 400: return 'invalid_argument';
    case 401: return 'unauthenticated';
    case 403: return 'permission_denied';
    case 404: return 'not_found';
    case 409: return 'failed_precondition';
    case 413: case 429: return 'resource_exhausted';
    default: return status >= 500 ? 'internal' : 'unknown';
  }
}

/** Reads a response's error body; non-JSON bodies become the message. */
export async function errorFrom(resp: Response): Promise<ChatdError> {
  const text = await resp.text().catch(() => '');
  let body: { message?: string } | null = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = { message: text.trim() };
  }
  if (body === null || typeof body !== 'object') body = { message: text.trim() };
  return new ChatdError(resp.status, body);
}
