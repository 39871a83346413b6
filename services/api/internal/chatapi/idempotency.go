package chatapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
)

// Idempotent creation and sending (docs/api.md "Idempotency"): a request_id
// seen before with the same input replays the stored response (200); with
// different input it is a conflict (409); a new one acts and answers 201.
// The chat_requests primary key decides between concurrent duplicates.

const (
	kindCreateChat  = "create_chat"
	kindSendMessage = "send_message"
	maxRequestIDLen = 200
)

// HTTPCodeHeader is the response metadata key the REST facade turns into
// the HTTP status (201 for a new resource).
const HTTPCodeHeader = "x-chatd-http-code"

// replayError carries a stored response out of a rolled-back bundle.
type replayError struct{ response []byte }

func (e *replayError) Error() string { return "request already handled" }

func validRequestID(id *string) (string, error) {
	if id == nil {
		return "", nil
	}
	if *id == "" || len(*id) > maxRequestIDLen {
		return "", invalid("request_id must be 1 to %d characters", maxRequestIDLen)
	}
	return *id, nil
}

// requestHash fingerprints a request's input: the caller's organization
// and the request with its request_id cleared, marshalled
// deterministically. The organization is part of the input because the
// same request means a different chat in another organization.
func requestHash(c auth.Claims, req proto.Message, clearID func(proto.Message)) []byte {
	m := proto.Clone(req)
	clearID(m)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("marshal request for hashing: %v", err))
	}
	h := sha256.New()
	h.Write(c.OrganizationID[:])
	h.Write(b)
	return h.Sum(nil)
}

// priorRequest looks the request up: nil when new, a *replayError with the
// stored response when it is a replay, a conflict status when the ID was
// used for different input.
// Request IDs are the caller's within the token's organization.
func priorRequest(ctx context.Context, q *queries.Queries, c auth.Claims, kind, id string, hash []byte) error {
	row, err := q.ChatRequestGet(ctx, requestKey(c, kind, id))
	return judgeRequest(row, err, id, hash)
}

// priorRequestWithLock is priorRequest read in a bundle's opening round
// trip, with the chat's lock: the option asks for the row, and judge,
// called in the bundle, says what priorRequest would.
func priorRequestWithLock(ctx context.Context, c auth.Claims, kind, id string, hash []byte) (opt chatstate.BundleOption, judge func() error) {
	var row queries.ChatRequest
	var err error
	opt = chatstate.WithRead(func(q *queries.Queries) { row, err = q.ChatRequestGet(ctx, requestKey(c, kind, id)) })
	return opt, func() error { return judgeRequest(row, err, id, hash) }
}

func requestKey(c auth.Claims, kind, id string) queries.ChatRequestGetParams {
	return queries.ChatRequestGetParams{OrganizationID: c.OrganizationID, OwnerID: c.UserID, Kind: kind, RequestID: id}
}

// judgeRequest is priorRequest's verdict on the row its lookup read.
func judgeRequest(row queries.ChatRequest, err error, id string, hash []byte) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up request_id %q: %w", id, err)
	}
	if !bytes.Equal(row.InputHash, hash) {
		return statusError(codes.AlreadyExists, ReasonRequestIDReused,
			fmt.Sprintf("request_id %q was already used with a different request; use a new request_id for new input", id))
	}
	return &replayError{response: row.Response}
}

func recordRequest(ctx context.Context, q *queries.Queries, c auth.Claims, kind, id string, chatID uuid.UUID, hash []byte, resp proto.Message) error {
	params, err := requestRecord(c, kind, id, chatID, hash, resp)
	if err != nil {
		return err
	}
	return q.ChatRequestInsert(ctx, params)
}

// recordRequestAtCommit is recordRequest sent with the bundle's COMMIT
// (chatstate.Tx.AtCommit): a duplicate or any other failure fails the
// bundle with the insert's error.
func recordRequestAtCommit(ctx context.Context, tx *chatstate.Tx, c auth.Claims, kind, id string, hash []byte, resp proto.Message) error {
	params, err := requestRecord(c, kind, id, tx.Chat().ID, hash, resp)
	if err != nil {
		return err
	}
	tx.AtCommit(func(q *queries.Queries) { _ = q.ChatRequestInsert(ctx, params) })
	return nil
}

func requestRecord(c auth.Claims, kind, id string, chatID uuid.UUID, hash []byte, resp proto.Message) (queries.ChatRequestInsertParams, error) {
	b, err := proto.Marshal(resp)
	if err != nil {
		return queries.ChatRequestInsertParams{}, fmt.Errorf("marshal response for request_id %q: %w", id, err)
	}
	return queries.ChatRequestInsertParams{
		OrganizationID: c.OrganizationID, OwnerID: c.UserID, Kind: kind, RequestID: id,
		ChatID: chatID, InputHash: hash, Response: b,
	}, nil
}

// isDuplicateRequest reports a concurrent duplicate losing the race on the
// chat_requests primary key.
func isDuplicateRequest(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && pgErr.ConstraintName == "chat_requests_pkey"
}

// replay decodes a stored response into into.
func replay(err error, into proto.Message) (bool, error) {
	var r *replayError
	if !errors.As(err, &r) {
		return false, nil
	}
	if uerr := proto.Unmarshal(r.response, into); uerr != nil {
		return true, fmt.Errorf("decode stored response: %w", uerr)
	}
	return true, nil
}

// created marks the response as a new resource (HTTP 201).
func created(ctx context.Context) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(HTTPCodeHeader, "201"))
}

func methodName(ctx context.Context) string {
	m, _ := grpc.Method(ctx)
	return m
}
