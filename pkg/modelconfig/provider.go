package modelconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/chatd/chatd/pkg/db/queries"
	"github.com/chatd/chatd/pkg/outbound"
	"github.com/chatd/chatd/pkg/secrets"
)

// ProviderType is a provider's wire protocol family.
type ProviderType string

// The provider types chat_providers.provider_type allows.
const (
	ProviderScripted     ProviderType = "scripted"
	ProviderOpenAI       ProviderType = "openai"
	ProviderOpenAICompat ProviderType = "openai-compat"
	ProviderAnthropic    ProviderType = "anthropic"
)

// ProviderTypes lists every provider type.
var ProviderTypes = []ProviderType{ProviderScripted, ProviderOpenAI, ProviderOpenAICompat, ProviderAnthropic}

// Valid reports whether t is a known provider type.
func (t ProviderType) Valid() bool { return slices.Contains(ProviderTypes, t) }

// needsAPIKey reports whether the type cannot work without a deployment API
// key. OpenAI-compatible servers (vLLM, Ollama, llama.cpp) often need none.
func (t ProviderType) needsAPIKey() bool { return t == ProviderOpenAI || t == ProviderAnthropic }

// Secret is a credential. It never prints, logs or marshals its value: every
// fmt verb, String, JSON, text and slog give "[redacted]" (or "" when empty).
// Reveal, or a string conversion, is the only way to read it.
type Secret string

const redacted = "[redacted]"

func (s Secret) redacted() string {
	if s == "" {
		return ""
	}
	return redacted
}

// Reveal returns the credential, for the code that sends it to the provider.
func (s Secret) Reveal() string { return string(s) }

// String implements fmt.Stringer.
func (s Secret) String() string { return s.redacted() }

// GoString implements fmt.GoStringer.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.redacted()) }

// Format implements fmt.Formatter, so no verb (%d, %x, %#v...) reaches the
// underlying string.
func (s Secret) Format(f fmt.State, verb rune) {
	switch verb {
	case 'q':
		fmt.Fprintf(f, "%q", s.redacted())
	default:
		fmt.Fprint(f, s.redacted())
	}
}

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.redacted()) }

// MarshalText implements encoding.TextMarshaler.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.redacted()), nil }

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.redacted()) }

// Provider is a deployment-scoped LLM provider as administrators see it.
// Its String and JSON forms never include the API key; JSON reports
// has_api_key instead.
type Provider struct {
	ID          uuid.UUID
	Type        ProviderType
	DisplayName string
	// BaseURL is the provider's endpoint; empty for the type's default.
	BaseURL string
	// APIKey is write-only through the API. It is the decrypted key; when
	// the stored key cannot be decrypted it is empty and credentialErr says
	// why.
	APIKey    Secret
	Enabled   bool
	CreatedAt time.Time
	UpdatedAt time.Time

	credentialErr error
}

// HasAPIKey reports whether an API key is stored (even one this process
// cannot decrypt).
func (p Provider) HasAPIKey() bool { return p.APIKey != "" || p.credentialErr != nil }

// CredentialErr says why the stored API key cannot be used: it is
// encrypted with a key CHATD_SECRETS_KEYS does not hold, or it does not
// decrypt. Its text names the key digest and the setting, never the key.
// Opening a model of the provider fails with it.
func (p Provider) CredentialErr() error { return p.credentialErr }

// String implements fmt.Stringer without the API key (and without a
// password embedded in the base URL).
func (p Provider) String() string {
	base := p.BaseURL
	if u, err := url.Parse(base); err == nil {
		base = u.Redacted()
	}
	return fmt.Sprintf("Provider{ID: %s, Type: %s, DisplayName: %q, BaseURL: %q, HasAPIKey: %t, Enabled: %t}",
		p.ID, p.Type, p.DisplayName, base, p.HasAPIKey(), p.Enabled)
}

// providerJSON is Provider's JSON form, the shape of chatd.v1.Provider.
type providerJSON struct {
	ID          uuid.UUID    `json:"id"`
	Type        ProviderType `json:"provider_type"`
	DisplayName string       `json:"display_name"`
	BaseURL     string       `json:"base_url"`
	HasAPIKey   bool         `json:"has_api_key"`
	Enabled     bool         `json:"enabled"`
	CreatedAt   time.Time    `json:"created_at"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

// MarshalJSON implements json.Marshaler without the API key.
func (p Provider) MarshalJSON() ([]byte, error) {
	return json.Marshal(providerJSON{
		ID: p.ID, Type: p.Type, DisplayName: p.DisplayName, BaseURL: p.BaseURL,
		HasAPIKey: p.HasAPIKey(), Enabled: p.Enabled, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	})
}

// Descriptor is a provider as any organization member sees it (the shape of
// chatd.v1.ProviderDescriptor): no credentials, no endpoint.
type Descriptor struct {
	ID          uuid.UUID    `json:"id"`
	Type        ProviderType `json:"provider_type"`
	DisplayName string       `json:"display_name"`
	Enabled     bool         `json:"enabled"`
	// Available: the provider can serve requests now.
	Available bool `json:"available"`
	// UnavailableReason says why not; empty when Available.
	UnavailableReason string `json:"unavailable_reason,omitempty"`
}

// Descriptor projects p for organization members. A provider is available
// when it is enabled and configured well enough to call: openai and
// anthropic need an API key, openai-compat needs a base URL (it has no
// default endpoint), scripted needs nothing.
func (p Provider) Descriptor() Descriptor {
	d := Descriptor{ID: p.ID, Type: p.Type, DisplayName: p.DisplayName, Enabled: p.Enabled}
	switch {
	case !p.Type.Valid():
		d.UnavailableReason = fmt.Sprintf("provider type %q is not supported", p.Type)
	case !p.Enabled:
		d.UnavailableReason = "the provider is disabled"
	case p.Type.needsAPIKey() && !p.HasAPIKey():
		d.UnavailableReason = "no API key is configured"
	case p.Type == ProviderOpenAICompat && p.BaseURL == "":
		d.UnavailableReason = "no base URL is configured"
	default:
		d.Available = true
	}
	return d
}

// providerFromRow is row with its API key decrypted by keys (nil: no
// keys, so an encrypted key is unusable).
func providerFromRow(r queries.ChatProvider, keys *secrets.Keyring) Provider {
	p := Provider{
		ID: r.ID, Type: ProviderType(r.ProviderType), DisplayName: r.DisplayName, BaseURL: r.BaseUrl,
		Enabled: r.Enabled, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	key, err := keys.Open(r.ApiKey, secrets.ProviderAPIKey(r.ID))
	if err != nil {
		p.credentialErr = fmt.Errorf("the API key of provider %s cannot be used: %w", r.ID, err)
		return p
	}
	p.APIKey = Secret(key)
	return p
}

// provider is providerFromRow with the reader's keys.
func (r Reader) provider(row queries.ChatProvider) Provider { return providerFromRow(row, r.keys) }

// ProviderCreate is the input of CreateProvider.
type ProviderCreate struct {
	Type        ProviderType
	DisplayName string
	// BaseURL is an absolute http(s) URL, or empty for the type's default.
	BaseURL string
	APIKey  Secret
	// Enabled defaults to true.
	Enabled *bool
}

// ProviderUpdate changes the fields that are set. The type cannot change.
type ProviderUpdate struct {
	DisplayName *string
	BaseURL     *string
	// APIKey replaces the stored key; a pointer to "" removes it.
	APIKey  *Secret
	Enabled *bool
}

func validateBaseURL(raw string) error {
	if raw == "" {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("base_url %q must be an absolute http or https URL", raw)
	}
	// The worker dials it: the outbound policy (no credentials in the URL,
	// no link-local or metadata address) applies now and again at dial time.
	if err := outbound.Default().CheckURL(raw); err != nil {
		return invalid("base_url is refused: %s", strings.TrimPrefix(err.Error(), outbound.ErrRefused.Error()+": "))
	}
	return nil
}

// CreateProvider adds a deployment provider.
func (s *Store) CreateProvider(ctx context.Context, in ProviderCreate) (Provider, error) {
	if !in.Type.Valid() {
		return Provider{}, invalid("unknown provider type %q: want %s", in.Type, typeList())
	}
	if err := validateBaseURL(in.BaseURL); err != nil {
		return Provider{}, err
	}
	enabled := true
	if in.Enabled != nil {
		enabled = *in.Enabled
	}
	id := uuid.New()
	key, err := s.keys.Seal(in.APIKey.Reveal(), secrets.ProviderAPIKey(id))
	if err != nil {
		return Provider{}, err
	}
	row, err := queries.New(s.pool).ChatProviderInsert(ctx, queries.ChatProviderInsertParams{
		ID: id, ProviderType: string(in.Type), DisplayName: in.DisplayName,
		BaseUrl: in.BaseURL, ApiKey: key, Enabled: enabled,
	})
	if err != nil {
		return Provider{}, fmt.Errorf("error inserting provider: %w", err)
	}
	return providerFromRow(row, s.keys), nil
}

// GetProvider returns provider id.
func (s *Store) GetProvider(ctx context.Context, id uuid.UUID) (Provider, error) {
	return s.Reader().GetProvider(ctx, id)
}

// GetProvider is Store.GetProvider through r's query handle.
func (r Reader) GetProvider(ctx context.Context, id uuid.UUID) (Provider, error) {
	row, err := r.q.ChatProviderGet(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return Provider{}, notFound("provider %s not found", id)
	}
	if err != nil {
		return Provider{}, fmt.Errorf("error getting provider %s: %w", id, err)
	}
	return r.provider(row), nil
}

// ListProviders lists every provider, oldest first.
func (s *Store) ListProviders(ctx context.Context) ([]Provider, error) {
	rows, err := queries.New(s.pool).ChatProviderList(ctx)
	if err != nil {
		return nil, fmt.Errorf("error listing providers: %w", err)
	}
	out := make([]Provider, len(rows))
	for i, r := range rows {
		out[i] = providerFromRow(r, s.keys)
	}
	return out, nil
}

// ListDescriptors lists every provider as a redacted descriptor.
func (s *Store) ListDescriptors(ctx context.Context) ([]Descriptor, error) {
	ps, err := s.ListProviders(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Descriptor, len(ps))
	for i, p := range ps {
		out[i] = p.Descriptor()
	}
	return out, nil
}

// UpdateProvider changes the fields of provider id that upd sets.
func (s *Store) UpdateProvider(ctx context.Context, id uuid.UUID, upd ProviderUpdate) (Provider, error) {
	if upd.BaseURL != nil {
		if err := validateBaseURL(*upd.BaseURL); err != nil {
			return Provider{}, err
		}
	}
	var out Provider
	err := s.inTx(ctx, func(q *queries.Queries) error {
		cur, err := q.ChatProviderGet(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("provider %s not found", id)
		}
		if err != nil {
			return fmt.Errorf("error getting provider %s: %w", id, err)
		}
		p := queries.ChatProviderUpdateParams{
			ID: id, DisplayName: cur.DisplayName, BaseUrl: cur.BaseUrl, ApiKey: cur.ApiKey, Enabled: cur.Enabled,
		}
		if upd.DisplayName != nil {
			p.DisplayName = *upd.DisplayName
		}
		if upd.BaseURL != nil {
			p.BaseUrl = *upd.BaseURL
		}
		if upd.APIKey != nil {
			if p.ApiKey, err = s.keys.Seal(upd.APIKey.Reveal(), secrets.ProviderAPIKey(id)); err != nil {
				return err
			}
		}
		if upd.Enabled != nil {
			p.Enabled = *upd.Enabled
		}
		row, err := q.ChatProviderUpdate(ctx, p)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFound("provider %s not found", id)
		}
		if err != nil {
			return fmt.Errorf("error updating provider %s: %w", id, err)
		}
		out = providerFromRow(row, s.keys)
		return nil
	})
	return out, err
}

// DeleteProvider removes provider id and, through the foreign key's cascade,
// every model config that uses it in every organization (deleted ones
// included). Each organization that loses its default elects a replacement.
//
// The provider row is locked first, which waits for in-flight writes that
// point configs at it and makes later ones fail as "unknown provider"; then
// the affected organizations' advisory locks are taken in ascending key
// order. Model-config writes lock a provider row before their organization,
// so the two never wait on each other in a cycle.
func (s *Store) DeleteProvider(ctx context.Context, id uuid.UUID) error {
	return s.inTx(ctx, func(q *queries.Queries) error {
		if _, err := q.ChatProviderLockForUpdate(ctx, id); errors.Is(err, pgx.ErrNoRows) {
			return notFound("provider %s not found", id)
		} else if err != nil {
			return fmt.Errorf("error locking provider %s: %w", id, err)
		}
		orgs, err := q.ChatModelConfigListOrganizationsByProvider(ctx, id)
		if err != nil {
			return fmt.Errorf("error listing organizations using provider %s: %w", id, err)
		}
		slices.SortFunc(orgs, func(a, b uuid.UUID) int {
			ka, kb := OrganizationLockKey(a), OrganizationLockKey(b)
			switch {
			case ka < kb:
				return -1
			case ka > kb:
				return 1
			}
			return 0
		})
		for _, org := range orgs {
			if err := q.ChatModelConfigLockOrganization(ctx, OrganizationLockKey(org)); err != nil {
				return fmt.Errorf("error locking model configs of organization %s: %w", org, err)
			}
		}
		if _, err := q.ChatProviderDelete(ctx, id); err != nil {
			return fmt.Errorf("error deleting provider %s: %w", id, err)
		}
		for _, org := range orgs {
			if err := ensureDefault(ctx, q, org); err != nil {
				return err
			}
			if err := checkInvariant(ctx, q, org); err != nil {
				return err
			}
		}
		return nil
	})
}

func typeList() string {
	names := make([]string, len(ProviderTypes))
	for i, t := range ProviderTypes {
		names[i] = string(t)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
