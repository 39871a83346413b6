package runner

import (
	"log/slog"

	"github.com/chatd/chatd/pkg/llm"
)

// callFailure is the text a failed model call leaves where the chat's users
// see it (last_error, the retry state): a provider's error body can echo
// the API key or the provider's internals, so that keeps only the kind, the
// HTTP status and the provider's name (llm.PublicMessage). The full text,
// with the provider's key scrubbed at its source (fantasyprovider), goes to
// the worker log.
func (r *runner) callFailure(callErr error) string {
	public := llm.PublicMessage(callErr)
	r.log.Warn("model call failed", slog.String("error", callErr.Error()), slog.String("shown", public))
	return public
}
