package llm

import (
	"fmt"
	"sync"

	"github.com/google/uuid"

	"github.com/chatd/chatd/pkg/modelconfig"
)

// Factory builds the Model of one provider type.
type Factory func(provider modelconfig.Provider, cfg modelconfig.ModelConfig) (Model, error)

var (
	factoriesMu sync.RWMutex
	factories   = map[modelconfig.ProviderType]Factory{}
)

// Register makes Open build models of provider type t with f. The
// implementations call it from their init functions; it panics if t is
// registered twice.
func Register(t modelconfig.ProviderType, f Factory) {
	factoriesMu.Lock()
	defer factoriesMu.Unlock()
	if _, dup := factories[t]; dup {
		panic(fmt.Sprintf("llm: provider type %q registered twice", t))
	}
	factories[t] = f
}

// Open builds the Model for model config cfg of provider. The provider type's
// implementation must be registered: import
// github.com/chatd/chatd/pkg/llm/providers for its side effect. Open does not
// look at the Enabled flags: whether a disabled provider or config may still
// be used is the caller's decision. A provider whose stored API key could
// not be decrypted fails with Provider.CredentialErr. Open does no I/O.
func Open(provider modelconfig.Provider, cfg modelconfig.ModelConfig) (Model, error) {
	if !provider.Type.Valid() {
		return nil, fmt.Errorf("llm: unknown provider type %q", provider.Type)
	}
	// Never call a provider without its key, nor with a ciphertext: the
	// error names the missing key's digest and CHATD_SECRETS_KEYS.
	if err := provider.CredentialErr(); err != nil {
		return nil, err
	}
	if provider.ID != uuid.Nil && cfg.ProviderID != uuid.Nil && provider.ID != cfg.ProviderID {
		return nil, fmt.Errorf("llm: model config %s belongs to provider %s, not %s", cfg.ID, cfg.ProviderID, provider.ID)
	}
	factoriesMu.RLock()
	f := factories[provider.Type]
	factoriesMu.RUnlock()
	if f == nil {
		return nil, fmt.Errorf("llm: no implementation registered for provider type %q (import github.com/chatd/chatd/pkg/llm/providers)", provider.Type)
	}
	return f(provider, cfg)
}

// InfoFor is the Info of model config cfg of provider.
func InfoFor(provider modelconfig.Provider, cfg modelconfig.ModelConfig) Info {
	name := provider.DisplayName
	if name == "" {
		name = string(provider.Type)
	}
	return Info{Provider: name, ProviderType: string(provider.Type), Model: cfg.Model, ContextLimit: cfg.ContextLimit}
}

// Supported reports whether this build can open models of provider type t:
// a known type with a registered implementation.
func Supported(t modelconfig.ProviderType) bool {
	if !t.Valid() {
		return false
	}
	factoriesMu.RLock()
	defer factoriesMu.RUnlock()
	return factories[t] != nil
}
