-- +goose Up
-- A response of the OpenAI-compatible surface (/v1/responses) is one turn
-- of a chat: the user message that starts it (message_id), or the queued
-- message that will start it while the chat is busy (queued_message_id;
-- the message takes that id as its queued_message_id when promoted). What
-- the chat does not keep itself — the model as the caller named it, the
-- metadata, background, a cancel — is kept here, so a response reads the
-- same after any restart.
CREATE TABLE openai_responses (
    id uuid PRIMARY KEY,
    organization_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    message_id bigint,
    queued_message_id bigint,
    model text NOT NULL,
    instructions text,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    background boolean NOT NULL DEFAULT false,
    previous_response_id uuid,
    conversation boolean NOT NULL DEFAULT false,
    cancelled_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (message_id IS NOT NULL OR queued_message_id IS NOT NULL)
);
CREATE INDEX openai_responses_chat ON openai_responses (chat_id, created_at);
-- One response per turn: a request repeated with its Idempotency-Key finds
-- the first one's record instead of adding a second.
CREATE UNIQUE INDEX openai_responses_message ON openai_responses (chat_id, message_id);
CREATE UNIQUE INDEX openai_responses_queued ON openai_responses (chat_id, queued_message_id);

-- A conversation of /v1/conversations is a chat; this keeps its metadata.
-- Any chat of the caller is a conversation, with or without a row here.
CREATE TABLE openai_conversations (
    chat_id uuid PRIMARY KEY REFERENCES chats (id) ON DELETE CASCADE,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE openai_conversations;
DROP TABLE openai_responses;
