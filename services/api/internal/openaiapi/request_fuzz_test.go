package openaiapi

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCreateRequest: no body makes the request parser panic or answer
// anything but a 4xx in its own words.
func FuzzCreateRequest(f *testing.F) {
	for _, seed := range []string{
		`{"model":"m","input":"hi"}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]}]}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"}]}`,
		`{"model":"m","input":"a","metadata":{"k":"v"},"tools":[{"type":"web_search"}]}`,
		`{"model":"m","input":"a","conversation":{"id":"conv_x"},"previous_response_id":"resp_y"}`,
		`{"input":"\u0000"}`, `[]`, `{"model":1}`, `{}{}`, "\xff", `{"input":[[[[[]]]]]}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/responses", strings.NewReader(body))
		var req createRequest
		err := decodeBody(r, &req)
		if err == nil {
			err = req.validate()
		}
		if err == nil {
			var texts []string
			texts, err = inputTexts(req.Input)
			for _, s := range texts {
				if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
					t.Fatalf("accepted text %q", s)
				}
			}
		}
		if err == nil {
			_, _, err = conversationID(req.Conversation)
		}
		if err == nil {
			return
		}
		var ae apiError
		if !errors.As(err, &ae) {
			t.Fatalf("not an API error: %v", err)
		}
		if ae.Status/100 != 4 || ae.Message == "" || strings.Contains(ae.Message, "json:") {
			t.Fatalf("bad refusal %d %q", ae.Status, ae.Message)
		}
	})
}
