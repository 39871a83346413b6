package openaiapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// quote quotes a caller's string for a message, cut to 100 characters.
func quote(s string) string {
	if utf8.RuneCountInString(s) > 100 {
		s = string([]rune(s)[:100]) + "…"
	}
	return strconv.Quote(s)
}
