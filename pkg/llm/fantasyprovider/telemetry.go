package fantasyprovider

import (
	"net/http"

	"github.com/chatd/chatd/pkg/modelconfig"
	"github.com/chatd/chatd/pkg/telemetry"
)

// Telemetry. Every model's SDK client sends its requests through
// telemetry.AttemptTransport, so each HTTP attempt to the provider (the
// SDK's own retries included) is a provider_attempt stage when the call's
// context carries a stage tracer (telemetry.ContextWithStages: the worker's
// runner, the api's title generation). Stream puts the model's
// telemetry.StageModel on the call's context, so the attempt carries the
// model that made it, whichever stage it runs in (stream, compaction).

// httpClient is the SDK client of every Model. Its transport bounds each
// phase before the response (transport.go); nothing bounds the whole
// request, since a stream lasts as long as the answer.
func httpClient() *http.Client {
	return &http.Client{Transport: telemetry.AttemptTransport(providerTransport)}
}

// stageModel is the model's telemetry.StageModel: provider is the wire
// protocol the client speaks, provider_type the configured type.
func (m *Model) stageModel(effort string) telemetry.StageModel {
	wire := string(modelconfig.ProviderOpenAI)
	if m.typ == modelconfig.ProviderAnthropic {
		wire = string(modelconfig.ProviderAnthropic)
	}
	return telemetry.StageModel{Provider: wire, ProviderType: m.info.ProviderType, Model: m.info.Model, ReasoningEffort: effort}
}
