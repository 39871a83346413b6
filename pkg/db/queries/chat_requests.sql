-- name: ChatRequestGet :one
SELECT * FROM chat_requests WHERE owner_id = @owner_id AND kind = @kind AND request_id = @request_id;

-- name: ChatRequestInsert :exec
INSERT INTO chat_requests (owner_id, kind, request_id, chat_id, input_hash, response)
VALUES (@owner_id, @kind, @request_id, @chat_id, @input_hash, @response);
