-- +goose Up
-- The function tools a /v1 response offered the model, as the caller gave
-- them (name, description, parameters, strict), and its tool_choice. The
-- chat keeps its client tools itself (chats.dynamic_tools), but those can
-- change with a later response; a response's own list says, for good, which
-- of its tool calls are function calls: the response ends with the first
-- assistant message that calls one, and shows it as a function_call item.
--
-- idempotency_key is the create's Idempotency-Key. Creating a chat or
-- sending a message keeps its own (chat_requests); submitting tool
-- results has none, so a response that continues a turn with
-- function_call_output is found again by this key.
ALTER TABLE openai_responses
    ADD COLUMN tools jsonb NOT NULL DEFAULT '[]'::jsonb,
    ADD COLUMN tool_choice text NOT NULL DEFAULT 'auto',
    ADD COLUMN idempotency_key text;
CREATE INDEX openai_responses_idempotency_key ON openai_responses (owner_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- +goose Down
DROP INDEX openai_responses_idempotency_key;
ALTER TABLE openai_responses DROP COLUMN idempotency_key, DROP COLUMN tool_choice, DROP COLUMN tools;
