// Package providers registers every model implementation with llm.Open.
// Import it for its side effect:
//
//	import _ "github.com/chatd/chatd/pkg/llm/providers"
package providers

import (
	// The scripted model (provider type scripted).
	_ "github.com/chatd/chatd/pkg/llm/scripted"
	// OpenAI, Anthropic and OpenAI-compatible servers, through fantasy.
	_ "github.com/chatd/chatd/pkg/llm/fantasyprovider"
)
