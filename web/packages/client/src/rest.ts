// The typed REST client: one method per endpoint of the OpenAPI document
// (request and response types come from src/gen/api.ts), plus the file
// endpoints, which are raw bodies outside the document.
import type { paths } from './gen/api';
import { ChatdError, errorFrom } from './errors';
import type {
  Chat, CreateChatRequest, EditMessageBody, ListChatsResponse, ListMessagesResponse, ListModelsResponse,
  SendMessageBody, SendMessageResponse, ToolResult, UpdateChatBody, UploadedFile,
} from './types';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';
type Op<P extends keyof paths, M extends Method> = NonNullable<paths[P][M]>;
/** The JSON body of an operation's 200 response. */
export type ResponseOf<P extends keyof paths, M extends Method> =
  Op<P, M> extends { responses: { 200: { content: { 'application/json': infer R } } } } ? R : never;
/** The JSON request body of an operation (never when it has none). */
export type BodyOf<P extends keyof paths, M extends Method> =
  Op<P, M> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;
type PathParams<P extends keyof paths, M extends Method> =
  Op<P, M> extends { parameters: { path: infer X } } ? X : never;
type QueryOf<P extends keyof paths, M extends Method> =
  Op<P, M> extends { parameters: { query?: infer Q } } ? Q : never;

export interface ClientOptions {
  /** The origin of chatd's REST facade ("" for the page's own origin). */
  baseUrl?: string;
  /** The bearer token, or a function returning the current one. */
  token: string | (() => string);
  /** fetch to use (defaults to the global one; Node 18+ has it). */
  fetch?: typeof fetch;
}

/** A fresh idempotency key for request_id (works outside secure contexts). */
export function requestId(): string {
  const c = globalThis.crypto;
  if (c?.randomUUID) return c.randomUUID();
  return Array.from(c.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, '0')).join('');
}

const enc = encodeURIComponent;

export class ChatdClient {
  readonly baseUrl: string;
  private readonly tokenFn: () => string;
  readonly fetch: typeof fetch;

  constructor(opts: ClientOptions) {
    this.baseUrl = (opts.baseUrl ?? '').replace(/\/+$/, '');
    const t = opts.token;
    this.tokenFn = typeof t === 'function' ? t : () => t;
    const f = opts.fetch ?? globalThis.fetch;
    this.fetch = (input, init) => f(input, init);
  }

  get token(): string {
    return this.tokenFn();
  }

  /** The organization of the token (its `org` claim), read without verifying it. */
  organizationId(): string {
    try {
      const payload = this.token.split('.')[1] ?? '';
      const json = atob(payload.replace(/-/g, '+').replace(/_/g, '/').padEnd(Math.ceil(payload.length / 4) * 4, '='));
      return String(JSON.parse(json).org ?? '');
    } catch {
      return '';
    }
  }

  /** Sends one request and decodes its JSON answer; failures throw ChatdError. */
  async raw<T>(method: string, path: string, init: { body?: BodyInit; json?: unknown; headers?: Record<string, string>; signal?: AbortSignal } = {}): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: 'application/json', ...init.headers };
    let body = init.body;
    if (init.json !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(init.json);
    }
    let resp: Response;
    try {
      resp = await this.fetch(this.baseUrl + path, { method, headers, body, signal: init.signal });
    } catch (err) {
      if (init.signal?.aborted) throw err;
      throw new ChatdError(0, { message: `could not reach chatd: ${(err as Error).message}` });
    }
    if (!resp.ok) throw await errorFrom(resp);
    const text = await resp.text();
    return (text ? JSON.parse(text) : {}) as T;
  }

  /**
   * Calls any operation of the OpenAPI document by its path template, e.g.
   * call('/api/v2/chats/{chat_id}', 'get', { path: { chat_id } }).
   */
  call<P extends keyof paths, M extends Method & keyof paths[P]>(
    template: P, method: M,
    args: { path?: PathParams<P, M>; query?: QueryOf<P, M>; body?: BodyOf<P, M>; signal?: AbortSignal } = {},
  ): Promise<ResponseOf<P, M>> {
    let url = String(template).replace(/\{(\w+)\}/g, (_, k: string) => {
      const v = (args.path as Record<string, unknown> | undefined)?.[k];
      if (v === undefined || v === '') throw new ChatdError(400, { message: `missing path parameter ${k}` });
      return enc(String(v));
    });
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries((args.query ?? {}) as Record<string, unknown>)) {
      if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    }
    if ([...q].length) url += `?${q}`;
    return this.raw(String(method).toUpperCase(), url, { json: args.body, signal: args.signal });
  }

  // ---- chats ----------------------------------------------------------
  listChats(query: QueryOf<'/api/v2/chats', 'get'> = {}): Promise<ListChatsResponse> {
    return this.call('/api/v2/chats', 'get', { query });
  }
  /** Every page of listChats. */
  async listAllChats(query: { archived?: boolean } = {}): Promise<Chat[]> {
    const out: Chat[] = [];
    let page_token = '';
    for (let i = 0; i < 100; i++) {
      const r = await this.listChats({ ...query, page_size: 200, page_token });
      out.push(...(r.chats ?? []));
      if (!r.next_page_token) break;
      page_token = r.next_page_token;
    }
    return out;
  }
  createChat(body: CreateChatRequest) {
    return this.call('/api/v2/chats', 'post', { body: { request_id: requestId(), ...body } });
  }
  getChat(chatId: string) {
    return this.call('/api/v2/chats/{chat_id}', 'get', { path: { chat_id: chatId } });
  }
  updateChat(chatId: string, body: UpdateChatBody) {
    return this.call('/api/v2/chats/{chat_id}', 'patch', { path: { chat_id: chatId }, body });
  }
  clearChat(chatId: string) {
    return this.call('/api/v2/chats/{chat_id}/clear', 'post', { path: { chat_id: chatId }, body: {} });
  }
  compactChat(chatId: string) {
    return this.call('/api/v2/chats/{chat_id}/compact', 'post', { path: { chat_id: chatId }, body: {} });
  }
  interrupt(chatId: string) {
    return this.call('/api/v2/chats/{chat_id}/interrupt', 'post', { path: { chat_id: chatId }, body: {} });
  }
  reconcileInvalid(chatId: string) {
    return this.call('/api/v2/chats/{chat_id}/reconcile-invalid', 'post', { path: { chat_id: chatId }, body: {} });
  }

  // ---- messages -------------------------------------------------------
  listMessages(chatId: string): Promise<ListMessagesResponse> {
    return this.call('/api/v2/chats/{chat_id}/messages', 'get', { path: { chat_id: chatId } });
  }
  sendMessage(chatId: string, body: SendMessageBody): Promise<SendMessageResponse> {
    return this.call('/api/v2/chats/{chat_id}/messages', 'post', { path: { chat_id: chatId }, body: { request_id: requestId(), ...body } });
  }
  editMessage(chatId: string, messageId: string, body: EditMessageBody) {
    return this.call('/api/v2/chats/{chat_id}/messages/{message_id}', 'patch', { path: { chat_id: chatId, message_id: messageId }, body });
  }
  deleteQueuedMessage(chatId: string, queuedMessageId: string) {
    return this.call('/api/v2/chats/{chat_id}/queue/{queued_message_id}', 'delete', { path: { chat_id: chatId, queued_message_id: queuedMessageId } });
  }
  promoteQueuedMessage(chatId: string, queuedMessageId: string) {
    return this.call('/api/v2/chats/{chat_id}/queue/{queued_message_id}/promote', 'post', { path: { chat_id: chatId, queued_message_id: queuedMessageId }, body: {} });
  }
  submitToolResults(chatId: string, results: ToolResult[]) {
    return this.call('/api/v2/chats/{chat_id}/tool-results', 'post', { path: { chat_id: chatId }, body: { results } });
  }

  // ---- files (raw bodies, not in the OpenAPI document) ----------------
  /** Uploads a file; reference it from a message with a `file` part. */
  uploadFile(data: Blob, name: string, mediaType = data.type || 'application/octet-stream'): Promise<UploadedFile> {
    return this.raw('POST', `/api/v2/files?name=${enc(name)}`, { body: data, headers: { 'Content-Type': mediaType } });
  }
  /** Downloads a file (404 when it never existed or has expired). */
  async downloadFile(fileId: string): Promise<Blob> {
    const resp = await this.fetch(`${this.baseUrl}/api/v2/files/${enc(fileId)}`, { headers: { Authorization: `Bearer ${this.token}` } });
    if (!resp.ok) throw await errorFrom(resp);
    return resp.blob();
  }

  // ---- models, providers, projects, MCP servers, overrides -------------
  listModels(organizationId = this.organizationId()): Promise<ListModelsResponse> {
    return this.call('/api/v2/organizations/{organization_id}/chats/models', 'get', { path: { organization_id: organizationId } });
  }
  listModelConfigs(organizationId = this.organizationId()) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-configs', 'get', { path: { organization_id: organizationId } });
  }
  createModelConfig(organizationId: string, body: BodyOf<'/api/v2/organizations/{organization_id}/chats/model-configs', 'post'>) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-configs', 'post', { path: { organization_id: organizationId }, body });
  }
  updateModelConfig(organizationId: string, modelConfigId: string, body: BodyOf<'/api/v2/organizations/{organization_id}/chats/model-configs/{model_config_id}', 'patch'>) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-configs/{model_config_id}', 'patch', { path: { organization_id: organizationId, model_config_id: modelConfigId }, body });
  }
  deleteModelConfig(organizationId: string, modelConfigId: string) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-configs/{model_config_id}', 'delete', { path: { organization_id: organizationId, model_config_id: modelConfigId } });
  }
  listProviders() {
    return this.call('/api/v2/chats/providers', 'get');
  }
  createProvider(body: BodyOf<'/api/v2/chats/providers', 'post'>) {
    return this.call('/api/v2/chats/providers', 'post', { body });
  }
  updateProvider(providerId: string, body: BodyOf<'/api/v2/chats/providers/{provider_id}', 'patch'>) {
    return this.call('/api/v2/chats/providers/{provider_id}', 'patch', { path: { provider_id: providerId }, body });
  }
  deleteProvider(providerId: string) {
    return this.call('/api/v2/chats/providers/{provider_id}', 'delete', { path: { provider_id: providerId } });
  }
  listProjects() {
    return this.call('/api/v2/projects', 'get');
  }
  createProject(body: BodyOf<'/api/v2/projects', 'post'>) {
    return this.call('/api/v2/projects', 'post', { body });
  }
  listMcpServers(organizationId = this.organizationId()) {
    return this.call('/api/v2/organizations/{organization_id}/chats/mcp-servers', 'get', { path: { organization_id: organizationId } });
  }
  getMcpServer(organizationId: string, mcpServerId: string) {
    return this.call('/api/v2/organizations/{organization_id}/chats/mcp-servers/{mcp_server_id}', 'get', { path: { organization_id: organizationId, mcp_server_id: mcpServerId } });
  }
  createMcpServer(organizationId: string, body: BodyOf<'/api/v2/organizations/{organization_id}/chats/mcp-servers', 'post'>) {
    return this.call('/api/v2/organizations/{organization_id}/chats/mcp-servers', 'post', { path: { organization_id: organizationId }, body });
  }
  updateMcpServer(organizationId: string, mcpServerId: string, body: BodyOf<'/api/v2/organizations/{organization_id}/chats/mcp-servers/{mcp_server_id}', 'patch'>) {
    return this.call('/api/v2/organizations/{organization_id}/chats/mcp-servers/{mcp_server_id}', 'patch', { path: { organization_id: organizationId, mcp_server_id: mcpServerId }, body });
  }
  deleteMcpServer(organizationId: string, mcpServerId: string) {
    return this.call('/api/v2/organizations/{organization_id}/chats/mcp-servers/{mcp_server_id}', 'delete', { path: { organization_id: organizationId, mcp_server_id: mcpServerId } });
  }
  getOrganizationModelOverride(organizationId: string, context: string) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-overrides/{context}', 'get', { path: { organization_id: organizationId, context } });
  }
  setOrganizationModelOverride(organizationId: string, context: string, body: BodyOf<'/api/v2/organizations/{organization_id}/chats/model-overrides/{context}', 'put'>) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-overrides/{context}', 'put', { path: { organization_id: organizationId, context }, body });
  }
  deleteOrganizationModelOverride(organizationId: string, context: string) {
    return this.call('/api/v2/organizations/{organization_id}/chats/model-overrides/{context}', 'delete', { path: { organization_id: organizationId, context } });
  }
  getUserModelOverride(context: string) {
    return this.call('/api/v2/users/me/chats/model-overrides/{context}', 'get', { path: { context } });
  }
  setUserModelOverride(context: string, body: BodyOf<'/api/v2/users/me/chats/model-overrides/{context}', 'put'>) {
    return this.call('/api/v2/users/me/chats/model-overrides/{context}', 'put', { path: { context }, body });
  }
  deleteUserModelOverride(context: string) {
    return this.call('/api/v2/users/me/chats/model-overrides/{context}', 'delete', { path: { context } });
  }
  listUserCompactionThresholds() {
    return this.call('/api/v2/users/me/chats/compaction-thresholds', 'get');
  }
  getUserCompactionThreshold(modelConfigId: string) {
    return this.call('/api/v2/users/me/chats/compaction-thresholds/{model_config_id}', 'get', { path: { model_config_id: modelConfigId } });
  }
  setUserCompactionThreshold(modelConfigId: string, body: BodyOf<'/api/v2/users/me/chats/compaction-thresholds/{model_config_id}', 'put'>) {
    return this.call('/api/v2/users/me/chats/compaction-thresholds/{model_config_id}', 'put', { path: { model_config_id: modelConfigId }, body });
  }
  deleteUserCompactionThreshold(modelConfigId: string) {
    return this.call('/api/v2/users/me/chats/compaction-thresholds/{model_config_id}', 'delete', { path: { model_config_id: modelConfigId } });
  }
}
