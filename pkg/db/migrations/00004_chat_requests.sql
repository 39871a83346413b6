-- +goose Up
-- Idempotency records for chat creation and message sends (request_id). The
-- primary key is the arbiter under concurrent duplicates: the second insert
-- waits for the first transaction and then fails, and the caller replays the
-- stored response instead of acting twice.
CREATE TABLE chat_requests (
    owner_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    kind text NOT NULL CHECK (kind IN ('create_chat', 'send_message')),
    request_id text NOT NULL CHECK (request_id <> '' AND length(request_id) <= 200),
    chat_id uuid NOT NULL REFERENCES chats (id) ON DELETE CASCADE,
    -- sha256 of the canonical request input: a replay must match it.
    input_hash bytea NOT NULL,
    -- The original response (protobuf), returned again on replay.
    response bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, kind, request_id)
);

CREATE INDEX chat_requests_chat_idx ON chat_requests (chat_id);

-- +goose Down
DROP TABLE chat_requests;
