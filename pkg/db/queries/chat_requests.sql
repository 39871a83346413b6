-- name: ChatRequestGet :one
SELECT * FROM chat_requests
WHERE organization_id = @organization_id AND owner_id = @owner_id AND kind = @kind AND request_id = @request_id;

-- name: ChatRequestInsert :exec
INSERT INTO chat_requests (organization_id, owner_id, kind, request_id, chat_id, input_hash, response)
VALUES (@organization_id, @owner_id, @kind, @request_id, @chat_id, @input_hash, @response);
