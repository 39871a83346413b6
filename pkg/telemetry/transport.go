package telemetry

import (
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
)

// AttrHTTPStatus is the provider_attempt span's HTTP status code.
const AttrHTTPStatus = "http.response.status_code"

// AttemptTransport wraps base so that every HTTP round trip to a model
// provider is one provider_attempt stage (spec "Stages"): a request the
// SDK retries produces one stage per attempt. The stage is started on the
// request's context, so it nests under the stage the call runs in (stream,
// compaction) and takes the tracer (StagesFromContext), the identity and
// the model (WithStageModel) from it; a request whose context carries no
// tracer is sent unrecorded. The stage ends when the response headers
// arrive, and is errored when the round trip fails or the status is 400
// or above. base is http.DefaultTransport when nil.
func AttemptTransport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return attemptTransport{base: base}
}

type attemptTransport struct{ base http.RoundTripper }

func (t attemptTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := r.Context()
	s := StagesFromContext(ctx)
	if s == nil {
		return t.base.RoundTrip(r)
	}
	var opts []StageOption
	m, ok := StageModelFrom(ctx)
	if ok {
		opts = append(opts, WithModel(m))
	}
	_, st := s.Start(ctx, StageProviderAttempt, opts...)
	resp, err := t.base.RoundTrip(r)
	switch {
	case err != nil:
		s.countProviderError(m, "transport")
		st.End(err)
	case resp.StatusCode >= 400:
		kind := "http_4xx"
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			kind = "http_429"
		case resp.StatusCode >= 500:
			kind = "http_5xx"
		}
		s.countProviderError(m, kind)
		st.SetAttributes(attribute.Int(AttrHTTPStatus, resp.StatusCode))
		st.End(fmt.Errorf("the provider answered HTTP %d", resp.StatusCode))
	default:
		st.SetAttributes(attribute.Int(AttrHTTPStatus, resp.StatusCode))
		st.End(nil)
	}
	return resp, err
}
