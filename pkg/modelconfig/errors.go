package modelconfig

import (
	"errors"
	"fmt"
)

// Error kinds. Callers match them with errors.Is and map them to transport
// codes once, at the edge: ErrNotFound to 404 (NotFound), ErrInvalid to 400
// (InvalidArgument). The error's text is a sentence fit for the client.
var (
	// ErrNotFound: the provider, organization or model config does not
	// exist; a model config of another organization, or a deleted one, is
	// not found either.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the input is malformed or refers to something unusable.
	ErrInvalid = errors.New("invalid argument")
	// ErrNoDefaultModelConfig: the organization has no enabled default model
	// config (of an enabled provider) to fall back to. Selection never falls
	// back to another organization's model.
	ErrNoDefaultModelConfig = errors.New("organization has no enabled default model config")
)

// Error is an ErrNotFound or ErrInvalid with a client-facing message.
type Error struct {
	// Kind is ErrNotFound or ErrInvalid.
	Kind error
	// Message is the whole text of Error().
	Message string
}

func (e *Error) Error() string { return e.Message }

// Unwrap makes errors.Is(err, e.Kind) true.
func (e *Error) Unwrap() error { return e.Kind }

func notFound(format string, args ...any) error {
	return &Error{Kind: ErrNotFound, Message: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return &Error{Kind: ErrInvalid, Message: fmt.Sprintf(format, args...)}
}
