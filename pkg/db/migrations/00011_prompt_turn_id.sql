-- +goose Up
-- A prompt's turn ID, the meta turn_id of lifecycle hook events. The api
-- allocates it before it dispatches user_prompt_submit, so that event and
-- every worker event of the turn the prompt starts carry the same ID; a
-- queued prompt keeps it until it is promoted into history. NULL on rows
-- that are no prompt and on prompts admitted without one (the worker then
-- derives the ID from the chat and the row ID).
ALTER TABLE chat_messages ADD COLUMN turn_id uuid;
ALTER TABLE chat_queued_messages ADD COLUMN turn_id uuid;

-- +goose Down
ALTER TABLE chat_queued_messages DROP COLUMN turn_id;
ALTER TABLE chat_messages DROP COLUMN turn_id;
