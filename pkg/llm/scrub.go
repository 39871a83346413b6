package llm

import "strings"

// redactedSecret replaces a configured secret in error text.
const redactedSecret = "[REDACTED]"

// Scrub returns err with every non-empty secret replaced in its text, so an
// error body echoing a credential ("Incorrect API key provided: sk-...")
// can be logged and stored. errors.Is and errors.As still see err's chain.
func Scrub(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	var keep []string
	for _, s := range secrets {
		if s != "" {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return err
	}
	return &scrubbedError{err: err, secrets: keep}
}

// ScrubString is s with every non-empty secret replaced.
func ScrubString(s string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, redactedSecret)
		}
	}
	return s
}

type scrubbedError struct {
	err     error
	secrets []string
}

func (e *scrubbedError) Error() string { return ScrubString(e.err.Error(), e.secrets...) }
func (e *scrubbedError) Unwrap() error { return e.err }
