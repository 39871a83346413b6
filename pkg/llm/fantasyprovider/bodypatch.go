package fantasyprovider

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/openai/openai-go/v3/option"

	"github.com/chatd/chatd/pkg/modelconfig"
)

// bodyPatch writes into each request body the config's OpenAI options that
// fantasy's conversion would not send: fields it has no wire mapping for
// (Chat Completions structured_outputs, Responses text_verbosity), fields
// it drops for models its tables say cannot take them (logit_bias and
// log probabilities on reasoning models, flex and priority service tiers,
// a reasoning summary on models it does not list as reasoning models), and
// logprobs, which it clears when top_log_probs is set although the API
// requires it then. The option then reaches the provider, which answers a
// model's unsupported parameter with an error naming it, rather than being
// accepted and silently ignored.
type bodyPatch struct {
	// set are top-level fields written as they are.
	set map[string]any
	// merge are object fields whose keys are written into the object the
	// body has (or a new one): reasoning.summary, text.verbosity.
	merge map[string]map[string]any
	// strictTools marks every function tool strict (Chat Completions
	// structured_outputs).
	strictTools bool
	// path is the endpoint the patch applies to.
	path string
}

// chatPatch is the patch of a Chat Completions model.
func chatPatch(po *modelconfig.OpenAIOptions) bodyPatch {
	p := bodyPatch{set: map[string]any{}, path: "/chat/completions"}
	if po == nil {
		return p
	}
	if po.LogitBias != nil {
		p.set["logit_bias"] = po.LogitBias
	}
	switch {
	case po.TopLogProbs != nil:
		p.set["logprobs"] = true
		p.set["top_logprobs"] = *po.TopLogProbs
	case po.LogProbs != nil:
		p.set["logprobs"] = *po.LogProbs
	}
	if po.ServiceTier != nil {
		p.set["service_tier"] = *po.ServiceTier
	}
	p.strictTools = po.StructuredOutputs != nil && *po.StructuredOutputs
	return p
}

// responsesPatch is the patch of a Responses model.
func responsesPatch(po *modelconfig.OpenAIOptions) bodyPatch {
	p := bodyPatch{set: map[string]any{}, merge: map[string]map[string]any{}, path: "/responses"}
	if po == nil {
		return p
	}
	if po.ServiceTier != nil {
		p.set["service_tier"] = *po.ServiceTier
	}
	if po.ReasoningSummary != nil {
		p.merge["reasoning"] = map[string]any{"summary": *po.ReasoningSummary}
	}
	if po.TextVerbosity != nil {
		p.merge["text"] = map[string]any{"verbosity": *po.TextVerbosity}
	}
	return p
}

func (p bodyPatch) empty() bool { return len(p.set) == 0 && len(p.merge) == 0 && !p.strictTools }

// option is the SDK option installing the patch; nil when there is nothing
// to patch.
func (p bodyPatch) option() option.RequestOption {
	if p.empty() {
		return nil
	}
	return option.WithMiddleware(p.middleware)
}

func (p bodyPatch) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	if req.Method != http.MethodPost || req.Body == nil || !strings.HasSuffix(req.URL.Path, p.path) {
		return next(req)
	}
	raw, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	patched, err := p.apply(raw)
	if err != nil {
		// Not a JSON object: sent as it was; the provider answers it.
		patched = raw
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(patched))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(patched)), nil }
	req.ContentLength = int64(len(patched))
	req.Header.Set("Content-Length", strconv.Itoa(len(patched)))
	return next(req)
}

// apply patches a JSON request body.
func (p bodyPatch) apply(raw []byte) ([]byte, error) {
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return nil, err
	}
	for k, v := range p.set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		body[k] = b
	}
	for k, fields := range p.merge {
		obj := map[string]json.RawMessage{}
		if cur, ok := body[k]; ok && !bytes.Equal(cur, []byte("null")) {
			if err := json.Unmarshal(cur, &obj); err != nil {
				return nil, err
			}
		}
		for fk, fv := range fields {
			b, err := json.Marshal(fv)
			if err != nil {
				return nil, err
			}
			obj[fk] = b
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return nil, err
		}
		body[k] = b
	}
	if p.strictTools {
		if tools, ok := body["tools"]; ok {
			var list []map[string]json.RawMessage
			if err := json.Unmarshal(tools, &list); err != nil {
				return nil, err
			}
			for _, t := range list {
				fn, ok := t["function"]
				if !ok {
					continue
				}
				var f map[string]json.RawMessage
				if err := json.Unmarshal(fn, &f); err != nil {
					return nil, err
				}
				f["strict"] = json.RawMessage("true")
				b, err := json.Marshal(f)
				if err != nil {
					return nil, err
				}
				t["function"] = b
			}
			b, err := json.Marshal(list)
			if err != nil {
				return nil, err
			}
			body["tools"] = b
		}
	}
	return json.Marshal(body)
}
