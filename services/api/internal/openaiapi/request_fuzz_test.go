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
		`{"model":"m","input":"a","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":{"x":{"type":"string"}}}}],"tool_choice":"auto"}`,
		`{"model":"m","input":"a","tools":[{"type":"function","name":"f","parameters":{"d":"\u0000"}}],"tool_choice":{"type":"function","name":"f"}}`,
		`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_text","text":"x"}]}]}`,
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
			var in input
			in, err = parseInput(req.Input)
			for _, s := range in.texts {
				if strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
					t.Fatalf("accepted text %q", s)
				}
			}
			for _, o := range in.outputs {
				if strings.ContainsRune(o.Output, 0) || strings.ContainsRune(o.CallID, 0) || o.CallID == "" {
					t.Fatalf("accepted output %+v", o)
				}
			}
		}
		if err == nil {
			var ts toolSet
			ts, err = parseTools(req.Tools, req.ToolChoice)
			for _, tool := range ts.declared {
				if !validToolName(tool.Name) {
					t.Fatalf("accepted tool name %q", tool.Name)
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
