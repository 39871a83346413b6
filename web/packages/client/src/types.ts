// Names for the generated REST schemas, and the stream's event shapes (the
// stream is not in the OpenAPI document: DESIGN.md "REST facade").
import type { components } from './gen/api';

type S = components['schemas'];
export type Chat = S['Chat'];
export type Message = S['Message'];
export type MessagePart = S['MessagePart'];
export type QueuedMessage = S['QueuedMessage'];
export type ModelConfig = S['ModelConfig'];
export type Provider = S['Provider'];
export type Project = S['Project'];
export type McpServer = S['McpServer'];
export type DynamicTool = S['DynamicTool'];
export type ToolResult = S['ToolResult'];
export type CreateChatRequest = S['CreateChatRequest'];
export type SendMessageBody = S['SendMessageBody'];
export type SendMessageResponse = S['SendMessageResponse'];
export type EditMessageBody = S['EditMessageBody'];
export type UpdateChatBody = S['UpdateChatBody'];
export type ListChatsResponse = S['ListChatsResponse'];
export type ListMessagesResponse = S['ListMessagesResponse'];
export type ListModelsResponse = S['ListModelsResponse'];
export type { components, paths, operations } from './gen/api';

/** Chat statuses, the spec's words. */
export type ChatStatus = 'waiting' | 'running' | 'interrupting' | 'requires_action' | 'error';

/** An upload (POST /api/v2/files); outside the OpenAPI document. */
export interface UploadedFile {
  id: string;
  name: string;
  media_type: string;
  size: number;
  chat_id?: string;
  created_at: string;
}

/**
 * A live part: a message part, or while a step's tool calls run (role
 * "tool") a call's status: "tool-status" (state running since started_at,
 * then finished or failed after duration_ms) and "tool-progress" (an MCP
 * server's progress, total and message). docs/tools.md "Watching calls run".
 */
export type LivePart = MessagePart & {
  duration_ms?: number;
  progress?: number;
  total?: number;
  message?: string;
};

/** A live part of the reply being generated. 64-bit integers are strings. */
export interface MessagePartPayload {
  role: string;
  part: LivePart & { index?: number };
  history_version: string;
  generation_attempt: string;
  seq: string;
}

export interface ToolCall {
  tool_call_id: string;
  tool_name: string;
  args: unknown;
}

export interface RetryPayload {
  attempt: number | string;
  delay_ms?: number | string;
  error?: string;
  retrying_at?: string;
}

export interface ErrorPayload {
  message: string;
  kind?: string;
  retryable?: boolean;
}

interface Base<T extends string> {
  type: T;
  chat_id: string;
  cursor?: string;
}

export type StreamEvent =
  | (Base<'message_part'> & { message_part: MessagePartPayload })
  | (Base<'preview_reset'> & { preview_reset: Record<string, never> })
  | (Base<'message'> & { message: Message })
  | (Base<'status'> & { status: { status: ChatStatus } })
  | (Base<'error'> & { error: ErrorPayload })
  | (Base<'queue_update'> & { queue_update: { queued_messages: QueuedMessage[] | null } })
  | (Base<'action_required'> & { action_required: { tool_calls: ToolCall[] | null } })
  | (Base<'retry'> & { retry: RetryPayload })
  | (Base<'history_reset'> & { history_reset: Record<string, never> });

export type StreamEventType = StreamEvent['type'];
