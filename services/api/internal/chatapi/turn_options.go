package chatapi

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"

	"github.com/chatd/chatd/pkg/chatstate"
	"github.com/chatd/chatd/pkg/db/queries"
	chatdv1 "github.com/chatd/chatd/pkg/gen/chatd/v1"
	"github.com/chatd/chatd/services/api/internal/turnwrite"
)

// The bundles that start or continue a turn take turnwrite.Options from
// an in-process caller (the OpenAI-compatible surface): the chat's client
// tools for the turn, and a record that commits with the turn or not at
// all.

// replacementTools validates opts' tools before any bundle: nil when the
// chat's tools are kept.
func replacementTools(opts turnwrite.Options) (json.RawMessage, error) {
	if !opts.ReplaceTools {
		return nil, nil
	}
	raw, err := validDynamicTools(opts.DynamicTools)
	if err != nil {
		return nil, err
	}
	if len(raw) == 0 {
		raw = json.RawMessage(`[]`)
	}
	return raw, nil
}

// replaceTools sets the chat's client tools to tools (nil: keep them).
// When the chat runs a turn that this bundle does not continue (busy), a
// change would reach that turn's next step, so it is refused.
func replaceTools(ctx context.Context, tx *chatstate.Tx, tools json.RawMessage, busy bool) error {
	if tools == nil {
		return nil
	}
	same, err := chatstate.SameDynamicTools(tx.Chat().DynamicTools, tools)
	if err != nil || same {
		return err
	}
	if busy {
		return statusError(codes.FailedPrecondition, ReasonTransitionNotAllowed,
			"the chat's client tools can change only between turns, and the chat is running one: send the same tools as the running turn's, or wait for it to end")
	}
	return tx.SetDynamicTools(ctx, tools)
}

// sentTurn is the turn a send started or queued.
func sentTurn(tx *chatstate.Tx, res chatstate.SendMessageResult) turnwrite.Turn {
	t := turnwrite.Turn{ChatID: tx.Chat().ID}
	if res.Message != nil {
		t.MessageID = &res.Message.ID
	}
	if res.QueuedMessage != nil {
		t.QueuedMessageID = &res.QueuedMessage.ID
	}
	return t
}

// recordTurn sends opts' record of turn with the bundle's COMMIT.
func recordTurn(tx *chatstate.Tx, opts turnwrite.Options, turn turnwrite.Turn) {
	if opts.Record == nil {
		return
	}
	write := opts.Record(turn)
	tx.AtCommit(func(q *queries.Queries) { _ = write(q) })
}

// SubmitToolResultsWith is SubmitToolResults with opts in its bundle: the
// chat's client tools replaced (the continued turn's next step offers
// them), and the write opts records, whose Turn names the message of the
// results, sent with the COMMIT.
func (s *Server) SubmitToolResultsWith(ctx context.Context, req *chatdv1.SubmitToolResultsRequest, opts turnwrite.Options) (*chatdv1.SubmitToolResultsResponse, error) {
	tools, err := replacementTools(opts)
	if err != nil {
		return nil, err
	}
	return s.submitToolResults(ctx, req, func(ctx context.Context, tx *chatstate.Tx, apply func() ([]queries.ChatMessage, error)) error {
		if err := replaceTools(ctx, tx, tools, false); err != nil {
			return err
		}
		rows, err := apply()
		if err != nil {
			return err
		}
		recordTurn(tx, opts, turnwrite.Turn{ChatID: tx.Chat().ID, MessageID: &rows[0].ID})
		return nil
	})
}
