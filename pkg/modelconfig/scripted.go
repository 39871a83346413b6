package modelconfig

import "github.com/google/uuid"

// The built-in scripted provider and the default model config migration
// 00003_scripted_model_default.sql gives every organization. The migration
// spells the same values; a test checks they agree.
const (
	// ScriptedProviderIDString is the fixed ID of the deployment-wide
	// scripted provider row.
	ScriptedProviderIDString = "00000000-0000-4000-8000-000000000001"
	// ScriptedModel is the model name of the default scripted config.
	ScriptedModel = "scripted"
	// ScriptedDisplayName is the display name of the default scripted config.
	ScriptedDisplayName = "Scripted (deterministic test model)"
	// ScriptedContextLimit is the context limit of the default scripted
	// config, in tokens.
	ScriptedContextLimit = 128000
)

// ScriptedProviderID is ScriptedProviderIDString parsed.
var ScriptedProviderID = uuid.MustParse(ScriptedProviderIDString)
