// Package openaiapi serves the OpenAI-compatible surface at /v1: the
// Responses API (a response is a turn of a chat) and the model list, in
// OpenAI's JSON and error shapes, so the official SDKs work with their
// base URL at chatd. Every call goes through ChatService's own methods with
// the caller's verified claims, so tenants, input limits, hooks and the
// state machine are exactly those of /api/v2.
package openaiapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/pkg/relayclient"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// Prefix is where the surface is mounted: the SDKs' base URL is
// <origin>/v1.
const Prefix = "/v1/"

// ChatService is the api's ChatService implementation with the in-process
// forms of the calls that start or continue a turn: each takes
// turnwrite.Options, so a response's record commits with its turn.
type ChatService interface {
	chatdv1.ChatServiceServer
	CreateChatWith(ctx context.Context, req *chatdv1.CreateChatRequest, opts turnwrite.Options) (*chatdv1.CreateChatResponse, error)
	SendMessageWith(ctx context.Context, req *chatdv1.SendMessageRequest, opts turnwrite.Options) (*chatdv1.SendMessageResponse, error)
	SubmitToolResultsWith(ctx context.Context, req *chatdv1.SubmitToolResultsRequest, opts turnwrite.Options) (*chatdv1.SubmitToolResultsResponse, error)
}

// Limiter is the per-user request rate shared with /api/v2.
type Limiter interface {
	Allow(c auth.Claims) (bool, time.Duration)
}

// Handler serves /v1.
type Handler struct {
	// Chats is the api's ChatService implementation, called in process
	// with the caller's claims in the context (it checks tenants itself).
	Chats ChatService
	// Q reads and writes the response records (openai_responses).
	Q        *queries.Queries
	Verifier *auth.Verifier
	// Limit is the per-user rate (nil: none): one token per /v1 request.
	Limit Limiter
	Log   *slog.Logger
	// Poll is how often a waiting request re-reads the chat (0:
	// DefaultPoll).
	Poll time.Duration
	// MaxBody bounds a request body (413 beyond it).
	MaxBody int64
	// Notify, when set, wakes a stream when its chat changes (chat:update
	// notifications, a hint: streams also poll every StreamPoll).
	Notify *nats.Conn
	// Relay, when set, carries the live parts of the worker running a
	// chat, which streams show token by token; without it they show each
	// model step when it is committed.
	Relay *relayclient.Client
	// StreamPoll is how often a stream re-reads its chat without a
	// notification (0: DefaultStreamPoll).
	StreamPoll time.Duration
	// Stopping, closed when the service begins to stop, ends streams and
	// waits at once rather than at the shutdown deadline: a stream's
	// client resumes with starting_after on another replica.
	Stopping <-chan struct{}
}

// DefaultPoll is how often a blocking create or a cancel re-reads its
// turn's stored state.
const DefaultPoll = 200 * time.Millisecond

// DefaultStreamPoll is how often a stream re-reads its chat when no
// notification came: notifications are only hints.
const DefaultStreamPoll = 2 * time.Second

// Register adds the /v1 routes to mux.
func (h *Handler) Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/models", h.authed(h.listModels))
	mux.HandleFunc("GET /v1/models/{model}", h.authed(h.getModel))
	mux.HandleFunc("POST /v1/responses", h.authed(h.createResponse))
	mux.HandleFunc("GET /v1/responses/{id}", h.authed(h.getResponse))
	mux.HandleFunc("POST /v1/responses/{id}/cancel", h.authed(h.cancelResponse))
	mux.HandleFunc("DELETE /v1/responses/{id}", h.authed(h.deleteResponse))
	mux.HandleFunc("GET /v1/responses/{id}/input_items", h.authed(h.listInputItems))
	mux.HandleFunc("POST /v1/conversations", h.authed(h.createConversation))
	mux.HandleFunc("GET /v1/conversations/{id}", h.authed(h.getConversation))
	mux.HandleFunc("POST /v1/conversations/{id}", h.authed(h.updateConversation))
	mux.HandleFunc("DELETE /v1/conversations/{id}", h.authed(h.deleteConversation))
	mux.HandleFunc("GET /v1/conversations/{id}/items", h.authed(h.listConversationItems))
	mux.HandleFunc("POST /v1/conversations/{id}/items", h.authed(h.addConversationItems))
	mux.HandleFunc("GET /v1/conversations/{id}/items/{item}", h.authed(h.getConversationItem))
	mux.HandleFunc("DELETE /v1/conversations/{id}/items/{item}", h.authed(h.deleteConversationItem))
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiError{Status: http.StatusNotFound, Type: typeInvalidRequest, Code: "unknown_url",
			Message: "There is no endpoint " + r.Method + " " + r.URL.Path + " in chatd's OpenAI-compatible API (see docs/openai.md)."})
	})
}

// authed verifies the bearer token, applies the rate limit and runs fn
// with the caller's claims in the context.
func (h *Handler) authed(fn func(w http.ResponseWriter, r *http.Request, c auth.Claims)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token, err := auth.FromAuthorizationHeader(r.Header.Get("Authorization"))
		var c auth.Claims
		if err == nil {
			c, err = h.Verifier.Verify(r.Context(), token)
		}
		if err != nil {
			writeError(w, apiError{Status: http.StatusUnauthorized, Type: typeInvalidRequest, Code: "invalid_api_key",
				Message: "The bearer token is missing or not valid: " + err.Error()})
			return
		}
		if h.Limit != nil {
			if ok, wait := h.Limit.Allow(c); !ok {
				writeError(w, rateLimited(w, wait))
				return
			}
		}
		if h.MaxBody > 0 {
			r.Body = http.MaxBytesReader(w, r.Body, h.MaxBody)
		}
		fn(w, r.WithContext(auth.WithClaims(r.Context(), c)), c)
	}
}

func (h *Handler) poll() time.Duration {
	if h.Poll > 0 {
		return h.Poll
	}
	return DefaultPoll
}

func (h *Handler) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.Default()
}

// sleep waits one poll interval; false when ctx ended or the service is
// stopping.
func (h *Handler) sleep(ctx context.Context) bool {
	t := time.NewTimer(h.poll())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-h.Stopping:
		return false
	case <-t.C:
		return true
	}
}
