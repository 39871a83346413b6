-- +goose Up
-- The events of a /v1 response's stream, numbered by seq from 0, exactly
-- as they were sent: every stream, on any api replica, appends the events
-- it computed (from the stored turn and the worker's live parts) before it
-- sends them, and the first append of a seq wins. So a live watcher, a
-- resumed one on another replica and a replay after completion number
-- every event the same, and a token streamed by an attempt that then died
-- keeps its number. data is the event's fields but type and
-- sequence_number.
CREATE TABLE openai_response_events (
    response_id uuid NOT NULL REFERENCES openai_responses (id) ON DELETE CASCADE,
    seq integer NOT NULL CHECK (seq >= 0),
    type text NOT NULL,
    data json NOT NULL,
    PRIMARY KEY (response_id, seq)
);

-- +goose Down
DROP TABLE openai_response_events;
