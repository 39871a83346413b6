// Package httperror is the JSON error body of every chatd HTTP endpoint
// (the REST contract's "Errors"): the api's REST facade and uploads and the
// stream's endpoint answer a failed request the same way, so one client
// reads them all.
package httperror

import (
	"encoding/json"
	"net/http"
)

// Body is the JSON of every error response.
type Body struct {
	// Message is a sentence a person can act on.
	Message string `json:"message"`
	// Code is the gRPC code in lower case ("not_found", ...).
	Code string `json:"code"`
	// Reason refines the code where clients branch on it ("CHAT_ARCHIVED").
	Reason string `json:"reason,omitempty"`
}

// Write answers with status and the body {message, code, reason}.
func Write(w http.ResponseWriter, status int, code, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Body{Message: msg, Code: code, Reason: reason})
}
