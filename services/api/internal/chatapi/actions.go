package chatapi

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/auth"
	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
)

// chatAction runs fn as a bundle on the caller's chat and answers with the
// committed chat.
func (s *Server) chatAction(ctx context.Context, rawID string, fn func(auth.Claims, *chatstate.Tx) error) (*chatdv1.Chat, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	res, err := s.update(ctx, c, rawID, func(tx *chatstate.Tx) error { return fn(c, tx) })
	if err != nil {
		return nil, err
	}
	chat, err := chatToProto(res.Chat)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return chat, nil
}

// InterruptChat applies Interrupt(user_cancel), plus FinishInterruption
// when no worker owns the chat.
func (s *Server) InterruptChat(ctx context.Context, req *chatdv1.InterruptChatRequest) (*chatdv1.InterruptChatResponse, error) {
	chat, err := s.chatAction(ctx, req.GetChatId(), func(_ auth.Claims, tx *chatstate.Tx) error {
		_, err := tx.Interrupt(ctx)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.InterruptChatResponse{Chat: chat}, nil
}

// SubmitToolResults applies CompleteRequiresAction(results).
func (s *Server) SubmitToolResults(ctx context.Context, req *chatdv1.SubmitToolResultsRequest) (*chatdv1.SubmitToolResultsResponse, error) {
	return s.submitToolResults(ctx, req, func(_ context.Context, _ *chatstate.Tx, apply func() ([]queries.ChatMessage, error)) error {
		_, err := apply()
		return err
	})
}

// submitToolResults checks the results, runs post_tool_use, and runs
// inBundle in the bundle; apply applies CompleteRequiresAction and returns
// the messages it inserted (the results' first).
func (s *Server) submitToolResults(ctx context.Context, req *chatdv1.SubmitToolResultsRequest,
	inBundle func(ctx context.Context, tx *chatstate.Tx, apply func() ([]queries.ChatMessage, error)) error,
) (*chatdv1.SubmitToolResultsResponse, error) {
	if len(req.GetResults()) == 0 {
		return nil, invalid("results must answer every pending tool call")
	}
	if n := len(req.GetResults()); n > s.cfg.MaxMessageParts {
		return nil, statusError(codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("there are %d tool results; the limit is %d", n, s.cfg.MaxMessageParts))
	}
	results := make([]chatstate.ToolResult, 0, len(req.GetResults()))
	size := 0
	for i, r := range req.GetResults() {
		if r.GetToolCallId() == "" {
			return nil, invalid("results[%d]: tool_call_id is required", i)
		}
		out, err := valueToJSON(r.GetOutput())
		if err != nil {
			return nil, invalid("results[%d]: output is not JSON: %v", i, err)
		}
		size += len(out)
		results = append(results, chatstate.ToolResult{ToolCallID: r.GetToolCallId(), Output: out, IsError: r.GetIsError()})
	}
	if size > s.cfg.MaxMessageBytes {
		return nil, statusError(codes.ResourceExhausted, ReasonPayloadTooLarge,
			fmt.Sprintf("the tool results are %d bytes; the limit is %d bytes", size, s.cfg.MaxMessageBytes))
	}
	// post_tool_use for each result, before the commit (toolresult_hooks.go).
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	effects, err := s.toolResultHooks(ctx, c, req.GetChatId(), results)
	if err != nil {
		return nil, err
	}
	chat, err := s.chatAction(ctx, req.GetChatId(), func(_ auth.Claims, tx *chatstate.Tx) error {
		return inBundle(ctx, tx, func() ([]queries.ChatMessage, error) { return tx.CompleteRequiresAction(ctx, results, effects) })
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.SubmitToolResultsResponse{Chat: chat}, nil
}

// CompactChat applies RequestCompaction, rolling back with "nothing to
// compact" when no uncompressed assistant message follows the latest
// boundary, so no model call is started for nothing.
func (s *Server) CompactChat(ctx context.Context, req *chatdv1.CompactChatRequest) (*chatdv1.CompactChatResponse, error) {
	chat, err := s.chatAction(ctx, req.GetChatId(), func(_ auth.Claims, tx *chatstate.Tx) error {
		if err := tx.RequestCompaction(ctx); err != nil {
			return err
		}
		ok, err := tx.HasCompactableHistory(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return statusError(codes.FailedPrecondition, ReasonNothingToCompact,
				"nothing to compact: no assistant reply since the chat was last compacted or cleared")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.CompactChatResponse{Chat: chat}, nil
}

// ClearChat applies ClearContext with the clear boundary triplet, rolling
// back with "nothing to clear" when nothing model-visible follows the
// latest boundary.
func (s *Server) ClearChat(ctx context.Context, req *chatdv1.ClearChatRequest) (*chatdv1.ClearChatResponse, error) {
	c, err := s.caller(ctx)
	if err != nil {
		return nil, err
	}
	// session_start (clear), after the clear's own checks (hooks.go).
	effects, err := s.clearSession(ctx, c, req.GetChatId())
	if err != nil {
		return nil, err
	}
	chat, err := s.chatAction(ctx, req.GetChatId(), func(_ auth.Claims, tx *chatstate.Tx) error {
		if err := checkClear(ctx, tx); err != nil {
			return err
		}
		boundary := chatstate.ClearBoundary(fmt.Sprintf("chat_cleared_%d", tx.Chat().SnapshotVersion))
		_, err := tx.ClearContext(ctx, append(boundary, effects...))
		return err
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.ClearChatResponse{Chat: chat}, nil
}

// checkClear is what ClearChat refuses: a state that does not allow
// ClearContext (its typed rejection), or "nothing to clear" when nothing
// model-visible follows the latest boundary.
func checkClear(ctx context.Context, tx *chatstate.Tx) error {
	if err := tx.CheckAllowed(chatstate.ClearContext); err != nil {
		return err
	}
	ok, err := tx.HasClearableHistory(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return statusError(codes.FailedPrecondition, ReasonNothingToClear,
			"nothing to clear: the chat has no messages since it was last cleared")
	}
	return nil
}

// ReconcileInvalidChat applies ReconcileInvalidState.
func (s *Server) ReconcileInvalidChat(ctx context.Context, req *chatdv1.ReconcileInvalidChatRequest) (*chatdv1.ReconcileInvalidChatResponse, error) {
	chat, err := s.chatAction(ctx, req.GetChatId(), func(_ auth.Claims, tx *chatstate.Tx) error {
		return tx.ReconcileInvalidState(ctx)
	})
	if err != nil {
		return nil, err
	}
	return &chatdv1.ReconcileInvalidChatResponse{Chat: chat}, nil
}
